// speechstream page: protocol v1 over WebSocket, Opus decoded with WebCodecs
// (PCM s16le where AudioDecoder is missing), played through an AudioWorklet ring buffer.
"use strict";

const RATE = 48000;
const $ = (id) => document.getElementById(id);
// What the page measured, for people and for the browser test.
const report = (window.speechstream = { ttfaMs: null, decodedSamples: 0, audioMs: null, done: false, errors: [], retries: 0 });

let ws, audio, player, decoder, contextSeq = 0, current = null, currentText = "", sentAt = 0, configured = "";
const useOpus = typeof AudioDecoder === "function";
$("codec").textContent = useOpus ? "Opus (WebCodecs)" : "PCM fallback";

function fail(message) {
  report.errors.push(message);
  $("status").textContent = message;
  $("status").className = "error";
}

async function ensureAudio() {
  if (audio) return;
  audio = new AudioContext({ sampleRate: RATE });
  await audio.audioWorklet.addModule("/static/player-worklet.js");
  player = new AudioWorkletNode(audio, "ring-player");
  player.connect(audio.destination);
  player.port.onmessage = ({ data }) => drawLevel(data.level);
  if (useOpus) {
    decoder = new AudioDecoder({
      output: (data) => {
        const samples = new Float32Array(data.numberOfFrames);
        data.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
        data.close();
        play(samples);
      },
      error: (e) => fail(`decoder: ${e.message}`),
    });
    decoder.configure({ codec: "opus", sampleRate: RATE, numberOfChannels: 1 });
  }
}

function play(samples) {
  report.decodedSamples += samples.length;
  $("decoded").textContent = `${(report.decodedSamples / RATE).toFixed(2)} s`;
  player.port.postMessage({ type: "samples", samples }, [samples.buffer]);
}

// Voice parameters are part of a connection's config, so new values mean a new connection.
function wantedConfig() {
  return JSON.stringify({
    type: "config", format: useOpus ? "opus" : "pcm_s16le", sample_rate: RATE,
    length_scale: 1 / +$("speed").value, noise_scale: +$("noise").value,
  });
}

function connect(config) {
  if (ws) ws.close();
  return new Promise((resolve, reject) => {
    // A gateway that requires an API key takes it from the page's own ?api_key=.
    const key = new URLSearchParams(location.search).get("api_key");
    const query = key ? `?api_key=${encodeURIComponent(key)}` : "";
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/stream${query}`;
    const socket = (ws = new WebSocket(url));
    socket.binaryType = "arraybuffer";
    socket.onopen = () => {
      socket.send(config);
      configured = config;
      resolve();
    };
    socket.onerror = () => reject(new Error("WebSocket failed"));
    socket.onclose = () => { if (ws === socket) ws = null; };
    socket.onmessage = ({ data }) => (typeof data === "string" ? onMessage(JSON.parse(data)) : onAudio(data));
  });
}

function onMessage(m) {
  if (m.type === "error" && m.retry_after_ms && m.context_id === current) return retryLater(m.retry_after_ms);
  if (m.type === "error") fail(`${m.code}: ${m.message}`);
  if (m.type === "done" && m.context_id === current) {
    report.audioMs = m.audio_ms;
    const finished = () => { report.done = true; $("status").textContent = `done: ${m.audio_ms} ms of audio`; };
    decoder ? decoder.flush().then(finished, (e) => fail(`decoder: ${e.message}`)) : finished();
  }
}

function onAudio(buffer) {
  const view = new DataView(buffer);
  const offset = view.getUint32(8, true);
  if (report.ttfaMs === null) {
    report.ttfaMs = performance.now() - sentAt;
    $("ttfa").textContent = `${report.ttfaMs.toFixed(0)} ms`;
  }
  const payload = new Uint8Array(buffer, 12);
  if (useOpus) {
    decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: (offset / RATE) * 1e6, data: payload }));
  } else {
    const pcm = new Int16Array(payload.slice().buffer);
    play(Float32Array.from(pcm, (s) => s / 32768));
  }
}

async function speak() {
  try {
    await ensureAudio();
    await audio.resume();
    stop();
    if (!ws || configured !== wantedConfig()) await connect(wantedConfig());
    Object.assign(report, { ttfaMs: null, decodedSamples: 0, audioMs: null, done: false, retries: 0 });
    currentText = $("text").value;
    sentAt = performance.now();
    send();
  } catch (e) {
    fail(e.message);
  }
}

function send() {
  $("status").textContent = "speaking…";
  $("status").className = "stats";
  current = `c${++contextSeq}`;
  ws.send(JSON.stringify({ type: "speak", context_id: current, text: currentText }));
}

// The server is busy (or this address has all the streams it may): say so, and try
// again when it says to. Time to first audio still counts from the click.
function retryLater(ms) {
  const refused = current;
  report.retries += 1;
  $("status").textContent = `busy, retrying in ${(ms / 1000).toFixed(1)} s…`;
  $("status").className = "stats";
  setTimeout(() => { if (current === refused && ws) send(); }, ms);
}

function stop() {
  if (current && ws && !report.done) {
    ws.send(JSON.stringify({ type: "cancel", context_id: current }));
    $("status").textContent = "stopped";
  }
  current = null;
  if (player) player.port.postMessage({ type: "clear" });
}

const meter = $("meter").getContext("2d");
function drawLevel(level) {
  const { width, height } = meter.canvas;
  meter.drawImage(meter.canvas, -2, 0);
  meter.clearRect(width - 2, 0, 2, height);
  const h = Math.min(1, level * 2.5) * height;
  meter.fillStyle = "#2a7ae2";
  meter.fillRect(width - 2, (height - h) / 2, 2, Math.max(1, h));
}

$("speak").onclick = speak;
$("stop").onclick = stop;
$("speed").oninput = () => { $("speed-value").textContent = `${(+$("speed").value).toFixed(2)}×`; };
