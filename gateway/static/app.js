// speechstream page: protocol v1 over WebSocket, Opus decoded with WebCodecs
// (PCM s16le where AudioDecoder is missing), played through an AudioWorklet queue.
"use strict";

const RATE = 48000;
const $ = (id) => document.getElementById(id);
// What the page measured, for people and for the browser test. `received`: the server
// sent the whole context and the page has decoded it; `done`: it has also been played.
// Samples are counted since the last Speak, question or Stop; `level` is the meter's 0..1
// (-60..0 dBFS); `state` is idle, speaking, busy, playing, done or error. In voice chat,
// ttfaMs counts from the end of the question, and `reply` is the speculation's outcome.
// `spans`: each sentence's text_span in the text, as heard; `resumes`: the times the
// context went on with another gateway.
const fresh = () => ({
  ttfaMs: null, decodedSamples: 0, audioMs: null, received: false, done: false, errors: [], retries: 0,
  playedSamples: 0, queuedSamples: 0, reply: null, replyText: "", spans: [], resumes: 0,
});
const report = (window.speechstream = { ...fresh(), level: 0, levelDb: null, status: "", state: "idle" });

let ws, audio, player, decoder, connectedTo = "", contextSeq = 0, currentText = "", sentAt = 0;
let turn = null; // the voice chat's question being typed (its turn_id), until Enter
let current = null; // the context being spoken or played, or null
let currentStream = null; // its audio frames' stream number, from audio_start
let streaming = false; // the server is still sending `current`: Stop must cancel it
let hearing = null; // what was heard of `current` in speak mode, to resume it elsewhere (newHearing)
// A gateway that goes away mid-context (1001: it stopped; 1012: it restarts) hands the
// context to another: the page connects again and says what was not heard whole, as the
// client library does (docs/protocol.md, "Going on elsewhere when a gateway goes away").
// A seed of its own makes a sentence said again sound the same; `timestamps` say where
// sentences start.
const SEED = Math.floor(Math.random() * 2 ** 31);
const RESUMABLE = [1001, 1012];
const RESUME_TRIES = 5; // the first at once, then after 0.2, 0.4, 0.8, 1.6 s
const FRAME = RATE / 50; // samples in a 20 ms frame
const useOpus = typeof AudioDecoder === "function";
$("codec").textContent = useOpus ? "Opus (WebCodecs)" : "PCM fallback";
// A link may carry the key (?api_key=KEY); the field is where a person types it.
$("key").value = new URLSearchParams(location.search).get("api_key") ?? "";

function setStatus(text, state, className = "stats") {
  $("status").textContent = report.status = text;
  $("status").className = className;
  report.state = state;
}

function fail(message) {
  report.errors.push(message);
  setStatus(message, "error", "error");
}

async function ensureAudio() {
  if (audio) return;
  audio = new AudioContext({ sampleRate: RATE });
  await audio.audioWorklet.addModule("/static/player-worklet.js");
  player = new AudioWorkletNode(audio, "queue-player", { outputChannelCount: [1] });
  player.connect(audio.destination);
  player.port.onmessage = ({ data }) => ("ended" in data ? onPlayed(data) : onProgress(data));
}

// A decoder per context: closing the last one drops the outputs it still owed (Stop).
function newDecoder() {
  const d = new AudioDecoder({
    output: (data) => {
      const samples = new Float32Array(data.numberOfFrames);
      data.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
      data.close();
      play(samples);
    },
    error: (e) => fail(`decoder: ${e.message}`),
  });
  d.configure({ codec: "opus", sampleRate: RATE, numberOfChannels: 1 });
  return d;
}

function play(samples) {
  if (hearing && hearing.drop > 0) { // heard before the gateway went away
    const dropped = Math.min(hearing.drop, samples.length);
    hearing.drop -= dropped;
    samples = samples.slice(dropped);
    if (!samples.length) return;
  }
  report.decodedSamples += samples.length;
  $("decoded").textContent = `${(report.decodedSamples / RATE).toFixed(2)} s`;
  player.port.postMessage({ type: "samples", samples }, [samples.buffer]);
}

// Voice parameters are part of a connection's config, and the key part of its URL, so
// new values of either mean a new connection.
function wanted() {
  const key = $("key").value.trim();
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/stream`
    + (key ? `?api_key=${encodeURIComponent(key)}` : ""); // a browser cannot set headers on a WebSocket
  const config = JSON.stringify({
    type: "config", format: useOpus ? "opus" : "pcm_s16le", sample_rate: RATE, seed: SEED, timestamps: true,
    length_scale: 1 / +$("speed").value, noise_scale: +$("noise").value,
    ...($("voice").value ? { voice: $("voice").value } : {}),
    ...(chatting() ? { chat: { speculation: $("speculation").value } } : {}),
  });
  return { key, url, config };
}

function connect({ key, url, config }) {
  if (ws) ws.close();
  connectedTo = "";
  return new Promise((resolve, reject) => {
    const socket = (ws = new WebSocket(url));
    socket.binaryType = "arraybuffer";
    let opened = false;
    socket.onopen = () => {
      opened = true;
      socket.send(config);
      connectedTo = url + config;
      resolve();
    };
    socket.onclose = ({ code }) => {
      if (!opened) return whyRefused(key).then((why) => reject(new Error(why))); // the handshake was refused
      if (ws !== socket) return;
      ws = null;
      if (streaming && hearing && RESUMABLE.includes(code)) return resume(code);
      if (streaming) {
        streaming = false;
        fail(`the connection to the server closed (${code})`);
      }
    };
    socket.onmessage = ({ data }) => (typeof data === "string" ? onMessage(JSON.parse(data)) : onAudio(data));
  });
}

// A page cannot read the HTTP status of a refused WebSocket handshake, so ask an HTTP
// endpoint behind the same key (GET /v1/voices) why, with the same key.
async function whyRefused(key) {
  try {
    const r = await fetch("/v1/voices", { headers: key ? { "X-API-Key": key } : {}, cache: "no-store" });
    if (r.status === 401) {
      $("key").focus();
      return key
        ? "The server refused this API key: correct it in the \u201cAPI key\u201d field above, then press Speak."
        : "This server requires an API key: type it in the \u201cAPI key\u201d field above, then press Speak.";
    }
    if (r.status === 429) {
      return `Too many wrong API keys from this address: try again in ${r.headers.get("Retry-After") ?? "a minute"} s.`;
    }
  } catch {
    // the server is unreachable: say so below
  }
  return "Could not connect to the server.";
}

function onMessage(m) {
  const id = m.context_id ?? m.turn_id; // a chat turn's reply and reply_text name the turn
  if (id !== undefined && id !== current) return; // a stopped context's last words
  if (m.type === "reply") {
    report.reply = m;
    $("outcome").textContent = `${m.outcome} (kept ${m.accepted_tokens} of ${m.draft_tokens} drafted tokens, ${m.rounds} rounds)`;
  }
  if (m.type === "reply_text") $("reply").textContent = report.replyText += m.text;
  if (m.type === "audio_start") currentStream = m.stream;
  if (m.type === "resuming") setStatus(`the server lost a stage (${m.code}); resuming at ${(m.audio_ms / 1000).toFixed(1)} s\u2026`, "speaking");
  if (m.type === "timestamps" && hearing) heardSentence(m);
  if (m.type === "error" && m.retry_after_ms && m.context_id) return retryLater(m);
  if (m.type === "error") {
    if (m.context_id) streaming = false; // an error for a context ends it
    fail(`${m.code}: ${m.message}`);
  }
  if (m.type === "done") {
    // All sent. Once all is decoded too, the player is told that nothing more comes; the
    // context is done when the player says it has played it all (onPlayed).
    const id = current;
    streaming = false;
    report.audioMs = m.audio_ms + (hearing ? Math.round((hearing.shift * 1000) / RATE) : 0);
    const decoded = () => {
      if (current !== id) return;
      report.received = true;
      setStatus(`received ${(m.audio_ms / 1000).toFixed(1)} s of audio, playing\u2026`, "playing");
      player.port.postMessage({ type: "end", id });
    };
    decoder ? decoder.flush().then(decoded, (e) => current === id && fail(`decoder: ${e.message}`)) : decoded();
  }
}

function onPlayed({ ended, played }) {
  if (ended !== current) return;
  Object.assign(report, { done: true, playedSamples: played, queuedSamples: 0 });
  setStatus(`done: ${report.audioMs} ms of audio`, "done");
}

function onAudio(buffer) {
  const view = new DataView(buffer);
  if (view.getUint16(2, true) !== currentStream) return; // sent before a Stop reached the server
  const offset = view.getUint32(8, true);
  if (report.ttfaMs === null) {
    report.ttfaMs = performance.now() - sentAt;
    $("ttfa").textContent = `${report.ttfaMs.toFixed(0)} ms`;
  }
  const payload = new Uint8Array(buffer, 12);
  if (hearing) {
    place(null);
    const end = offset + (useOpus ? FRAME : payload.length / 2) + hearing.shift;
    hearing.heard = Math.max(hearing.heard, end);
  }
  if (useOpus) {
    decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: (offset / RATE) * 1e6, data: payload }));
  } else {
    const pcm = new Int16Array(payload.slice().buffer);
    play(Float32Array.from(pcm, (s) => s / 32768));
  }
}

// Ready to send: the audio running, the connection open with the config wanted now.
async function prepare() {
  await ensureAudio();
  await audio.resume();
  const target = wanted();
  if (!ws || connectedTo !== target.url + target.config) await connect(target);
}

async function speak() {
  try {
    halt();
    Object.assign(report, fresh());
    await prepare();
    if (useOpus) decoder = newDecoder();
    currentText = $("text").value;
    sentAt = performance.now();
    send();
  } catch (e) {
    fail(e.message);
  }
}

const chatting = () => $("chat-mode").checked;

// Voice chat: the question so far goes out at each word's end, as a recognizer's partial
// transcript would; Enter sends it as final, and its reply plays as a context named by the turn.
async function typed(event) {
  const text = $("line").value;
  const final = event.type === "keydown";
  if (final ? event.key !== "Enter" : !/\s$/.test(text) && event.inputType !== "insertFromPaste") return;
  if (!text.trim()) return;
  try {
    if (!turn) {
      halt();
      Object.assign(report, fresh());
      $("reply").textContent = "";
      $("outcome").textContent = "–";
      await prepare();
      turn = `t${++contextSeq}`;
    }
    const id = turn;
    if (final) {
      turn = null;
      hearing = null; // a turn does not resume: the conversation was the old connection's
      if (useOpus) decoder = newDecoder();
      current = id;
      streaming = true;
      sentAt = performance.now();
      setStatus("thinking…", "speaking");
      $("line").value = "";
    }
    ws.send(JSON.stringify({ type: "user", turn_id: id, text: text.trim(), final }));
  } catch (e) {
    fail(e.message);
  }
}

function send() {
  setStatus("speaking\u2026", "speaking");
  current = `c${++contextSeq}`;
  streaming = true;
  hearing = newHearing(currentText);
  ws.send(JSON.stringify({ type: "speak", context_id: current, text: currentText }));
}

// What was heard of a context: its text; where its audio got to, in samples; the
// sentences whose timestamps came (span in the text, word times in ms as heard, samples
// heard before them); and, once it resumed, where the new context's audio falls: from
// its sample `cut` on (the first `drop` decoded samples are skipped), at `shift` more.
function newHearing(text) {
  return { text, heard: 0, sentences: [], anchor: null, textStart: 0, told: 0, cut: 0, shift: 0, drop: 0 };
}

// The gateway went away mid-context: connect again, and say the text from the last
// sentence whose first word was heard (every one before it was heard whole).
async function resume(code) {
  const id = current, h = hearing;
  report.resumes += 1;
  setStatus(`the server went away (${code}): going on with another\u2026`, "speaking");
  if (decoder) await decoder.flush().catch(() => {}); // what the old stream owes plays first
  const heardMs = (h.heard * 1000) / RATE;
  h.anchor = [...h.sentences].reverse().find((s) => s.wordMs[0] + 1 <= heardMs) ?? null; // +1: times are rounded
  Object.assign(h, { textStart: h.anchor ? h.anchor.span[0] : 0, told: h.sentences.at(-1)?.span[1] ?? 0, cut: null });
  for (let i = 0; current === id; i++) {
    try {
      await connect(wanted());
      break;
    } catch (e) {
      if (i + 1 === RESUME_TRIES) {
        streaming = false;
        return fail(`could not resume: ${e.message}`);
      }
      await new Promise((wake) => setTimeout(wake, 200 * 2 ** i));
    }
  }
  if (current !== id) return; // stopped meanwhile
  if (useOpus) decoder = newDecoder();
  ws.send(JSON.stringify({ type: "speak", context_id: id, text: h.text.slice(h.textStart) }));
}

// Once per resumed stream: where its sample 0 falls in what was heard. Its first
// timestamps, the anchor sentence's again, tell it within a millisecond (all its words'
// times together); lacking them, the samples heard before the anchor's.
function place(m) {
  const h = hearing;
  if (h.cut !== null) return;
  let start = 0;
  if (h.anchor) {
    const again = m ? [...m.start_ms, ...m.end_ms] : [];
    const same = m && m.text_span[0] + h.textStart === h.anchor.span[0] && again.length === h.anchor.wordMs.length;
    start = same
      ? Math.round(((h.anchor.wordMs.reduce((sum, t, i) => sum + t - again[i], 0) / again.length) * RATE) / 1000)
      : h.anchor.heardBefore;
  }
  h.cut = h.drop = Math.max(0, h.heard - start);
  h.shift = h.heard - h.cut;
}

function heardSentence(m) {
  const h = hearing;
  place(m);
  const span = [m.text_span[0] + h.textStart, m.text_span[1] + h.textStart];
  if (!m.start_ms.length || span[1] <= h.told) return; // wordless, or its words' times came before
  const shiftMs = (h.shift * 1000) / RATE;
  report.spans.push(span);
  h.sentences.push({ span, wordMs: [...m.start_ms, ...m.end_ms].map((t) => t + shiftMs), heardBefore: h.heard });
}

// The server is busy (or this address has all the streams it may): say so, and try
// again when it says to. Time to first audio still counts from the click.
function retryLater(m) {
  const refused = current;
  streaming = false; // refused: there is nothing to cancel
  report.retries += 1;
  const why = m.code === "server_busy" ? "Server busy (at capacity)" : "Too many streams from this address";
  setStatus(`${why}: retrying in ${(m.retry_after_ms / 1000).toFixed(1)} s (attempt ${report.retries})\u2026`,
    "busy", "busy");
  setTimeout(() => { if (current === refused && ws) send(); }, m.retry_after_ms);
}

// Cancel what the server still sends, forget the context, and empty the player.
function halt() {
  if (streaming && ws) ws.send(JSON.stringify({ type: "cancel", context_id: current }));
  streaming = false;
  current = currentStream = hearing = null;
  if (decoder && decoder.state !== "closed") decoder.close();
  decoder = null;
  if (player) player.port.postMessage({ type: "clear" });
}

function stop() {
  halt();
  setStatus("stopped", "idle");
}

function onProgress({ level, played, queued }) {
  Object.assign(report, { playedSamples: played, queuedSamples: queued });
  report.levelDb = level > 0 ? 20 * Math.log10(level) : null;
  report.level = level > 0 ? Math.min(1, Math.max(0, (report.levelDb + 60) / 60)) : 0;
  drawLevel(report.level);
}

// The meter: the last 200 levels (about 4 s), newest on the right, redrawn whole.
const meter = $("meter").getContext("2d");
const levels = new Array(200).fill(0);
function drawLevel(level) {
  levels.push(level);
  levels.shift();
  const { width, height } = meter.canvas;
  const w = width / levels.length;
  meter.clearRect(0, 0, width, height);
  meter.fillStyle = "#2a7ae2";
  levels.forEach((l, i) => {
    const h = Math.max(2, 2 * Math.round((l * height) / 2)); // even, so that it centres on whole pixels
    meter.fillRect(i * w, (height - h) / 2, w, h);
  });
}

// The voices this server speaks with, for both modes (the first is its default).
async function listVoices() {
  const key = $("key").value.trim();
  try {
    const r = await fetch("/v1/voices", { headers: key ? { "X-API-Key": key } : {}, cache: "no-store" });
    if (!r.ok) return;
    const { voices } = await r.json();
    $("voice").replaceChildren(...voices.map((v) => new Option(`${v.id} (${v.language})`, v.id)));
  } catch {
    // unreachable: the server's default voice is used
  }
}

function showMode() {
  $("chat").hidden = !chatting();
  $("speak-mode").hidden = chatting();
  $("speak").hidden = chatting();
  $("ttfa-label").textContent = chatting() ? "end of question → first audio" : "first audio";
}

$("speak").onclick = speak;
$("line").addEventListener("input", typed);
$("line").addEventListener("keydown", typed);
document.querySelectorAll("input[name=mode]").forEach((r) => (r.onchange = showMode));
$("key").onchange = listVoices;
listVoices();
$("stop").onclick = stop;
$("speed").oninput = () => { $("speed-value").textContent = `${(+$("speed").value).toFixed(2)}\u00d7`; };
setStatus("ready", "idle");
