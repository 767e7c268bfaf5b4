// speechstream's page: its controls wired to a protocol v1 Connection (connection.js), its
// Audio (audio.js) and, to talk, its Microphone (microphone.js), and what they do shown:
// status, time to first audio, the level, the turns heard and answered (turns.js).

import { Audio, RATE } from "./audio.js";
import { Connection } from "./connection.js";
import { Microphone } from "./microphone.js";
import { Turns } from "./turns.js";

const $ = (id) => document.getElementById(id);

// What the page measured. `received`: the server sent the whole context and the page has
// decoded it; `done`: it has also been played. Samples are counted since the last Speak,
// question or Stop; `level` is the meter's 0..1 (-60..0 dBFS); `state` is idle, speaking,
// busy, playing, done, connecting, listening or error. In voice chat, ttfaMs counts from
// the end of the question, and `reply` is the speculation's outcome. `spans`: each sentence's text_span in the text, as
// heard; `resumes`: the times the context went on with another gateway. Talking (listen
// mode): `listening`, the microphone is sent; `turns`, each spoken turn (turns.js):
// {turn_id, transcript, final, reply (its text), outcome, cancelled (barge-in),
// voice_to_voice_ms}; `micMs`, the microphone's audio sent; `done` and the counts are then
// the last reply's.
const fresh = () => ({
  ttfaMs: null, decodedSamples: 0, audioMs: null, received: false, done: false, errors: [], retries: 0,
  playedSamples: 0, queuedSamples: 0, reply: null, replyText: "", spans: [], resumes: 0,
  listening: false, turns: [],
});

// The level meter: the last 200 levels (about 4 s), newest on the right, redrawn whole.
class Meter {
  #context;
  #levels = new Array(200).fill(0);

  constructor(canvas) {
    this.#context = canvas.getContext("2d");
  }

  draw(level) {
    const meter = this.#context, levels = this.#levels;
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
}

// The Audio's and the Connection's listener (see each for what it is told).
class Page {
  #report = { ...fresh(), level: 0, state: "idle" };
  #sentAt = 0;
  #meter = new Meter($("meter"));
  #audio = new Audio(this);
  #connection = new Connection(this.#audio, this);
  #turns = new Turns($("turns"), this.#report.turns);
  #microphone = null; // while talking

  constructor() {
    $("codec").textContent = this.#audio.opus ? "Opus (WebCodecs)" : "PCM fallback";
    // A link may carry the key (?api_key=KEY); the field is where a person types it.
    $("key").value = new URLSearchParams(location.search).get("api_key") ?? "";
    $("speak").onclick = () => this.#speak();
    $("line").addEventListener("input", (event) => this.#typed(event));
    $("line").addEventListener("keydown", (event) => this.#typed(event));
    document.querySelectorAll("input[name=mode]").forEach((r) => (r.onchange = () => this.#showMode()));
    $("key").onchange = () => this.#listVoices();
    this.#listVoices();
    $("stop").onclick = () => this.#stop();
    $("talk").onclick = () => (this.#microphone ? this.#doneTalking() : this.#talk());
    $("end-speech").onclick = () => this.#connection.endOfSpeech();
    $("speed").oninput = () => { $("speed-value").textContent = `${(+$("speed").value).toFixed(2)}\u00d7`; };
    this.#status("ready", "idle");
  }

  // A copy of what the page measured, taken at each read.
  get measured() {
    return structuredClone({ ...this.#report, micMs: this.#connection.sentMs });
  }

  async #speak() {
    try {
      this.#start();
      await this.#connection.prepare();
      this.#sentAt = performance.now();
      this.#connection.speak($("text").value);
    } catch (e) {
      this.fail(e.message);
    }
  }

  // Voice chat: the question so far goes out at each word's end, as a recognizer's partial
  // transcript would; Enter sends it as final, and its reply plays as a context named by the turn.
  async #typed(event) {
    const text = $("line").value;
    const final = event.type === "keydown";
    if (final ? event.key !== "Enter" : !/\s$/.test(text) && event.inputType !== "insertFromPaste") return;
    if (!text.trim()) return;
    try {
      if (!this.#connection.asking) {
        this.#start();
        $("reply").textContent = "";
        $("outcome").textContent = "–";
        await this.#connection.prepare();
      }
      if (final) {
        this.#sentAt = performance.now();
        this.#status("thinking…", "speaking");
        $("line").value = "";
      }
      this.#connection.ask(text.trim(), final);
    } catch (e) {
      this.fail(e.message);
    }
  }

  // Talk: the microphone, on a connection of its own that listens (and chats in Voice
  // chat); what is heard, and answered, shows in the turns.
  async #talk() {
    this.#start();
    try {
      this.#status("asking for the microphone\u2026", "connecting");
      $("talk").disabled = true; // one request at a time
      const microphone = (this.#microphone = await Microphone.open().finally(() => ($("talk").disabled = false)));
      this.#showTalking(true);
      await this.#connection.listen();
      if (this.#microphone !== microphone) return; // stopped meanwhile
      await microphone.start((pcm) => this.#connection.hear(pcm));
      this.#report.listening = true;
      this.#status(this.#chatting() ? "listening: ask a question\u2026" : "listening: speak\u2026", "listening");
    } catch (e) {
      this.#hangUp();
      this.#connection.halt();
      this.fail(e.code === "listen_unavailable"
        ? "This server does not listen: it runs no speech recognizer (start it with --listen, or --chat)."
        : e.message);
    }
  }

  // Talk's Stop: the turn being spoken ends now and is still answered; nothing more is sent.
  #doneTalking() {
    this.#connection.endOfSpeech();
    this.#hangUp();
    this.#status("stopped listening", "idle");
  }

  #hangUp() {
    this.#microphone?.stop();
    this.#microphone = null;
    this.#report.listening = false;
    this.#showTalking(false);
  }

  #showTalking(talking) {
    $("talk").textContent = talking ? "Stop talking" : "Talk";
    $("talk").setAttribute("aria-pressed", String(talking));
    $("end-speech").disabled = !talking;
    if (talking) $("ttfa").textContent = "\u2013";
    this.#showMode();
  }

  // A new context: the last one stopped, the microphone too, and the counts start again.
  #start() {
    this.#hangUp();
    this.#connection.halt();
    Object.assign(this.#report, fresh());
    this.#turns.clear(this.#report.turns);
  }

  #stop() {
    this.#hangUp();
    this.#connection.halt();
    this.#status("stopped", "idle");
  }

  #chatting() {
    return $("chat-mode").checked;
  }

  #showMode() {
    const chatting = this.#chatting();
    $("chat").hidden = !chatting;
    $("speak-mode").hidden = chatting;
    $("speak").hidden = chatting;
    $("ttfa-label").textContent = this.#microphone ? "end of speech \u2192 first audio (voice-to-voice)"
      : chatting ? "end of question → first audio" : "first audio";
  }

  // The voices this server speaks with, for both modes (the first is its default).
  async #listVoices() {
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

  #status(text, state, className = "stats") {
    $("status").textContent = text;
    $("status").className = className;
    this.#report.state = state;
  }

  // The Connection's questions.

  settings() {
    const key = $("key").value.trim();
    const voice = {
      length_scale: 1 / +$("speed").value, noise_scale: +$("noise").value,
      ...($("voice").value ? { voice: $("voice").value } : {}),
      ...(this.#chatting() ? { chat: { speculation: $("speculation").value } } : {}),
    };
    return { key, voice };
  }

  // A page cannot read the HTTP status of a refused WebSocket handshake, so ask an HTTP
  // endpoint behind the same key (GET /v1/voices) why, with the same key.
  async whyRefused(key) {
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

  // What the Connection tells.

  speaking() {
    this.#status("speaking\u2026", "speaking");
  }

  message(m) {
    if (this.#connection.listening) {
      this.#turns.replied(m);
      if (m.type === "cancelled") this.#status("interrupted: listening\u2026", "listening"); // the player was emptied
      return;
    }
    if (m.type === "reply") {
      this.#report.reply = m;
      $("outcome").textContent = `${m.outcome} (kept ${m.accepted_tokens} of ${m.draft_tokens} drafted tokens, ${m.rounds} rounds)`;
    }
    if (m.type === "reply_text") $("reply").textContent = this.#report.replyText += m.text;
    if (m.type === "resuming") {
      this.#status(`the server lost a stage (${m.code}); resuming at ${(m.audio_ms / 1000).toFixed(1)} s\u2026`, "speaking");
    }
  }

  // Listen mode: what the recognizer heard.
  listened(m, endedAt) {
    const turn = this.#turns.heard(m, endedAt);
    if (m.type === "speech_started") this.#status("hearing\u2026", "listening");
    if (m.type === "transcript" && m.final) {
      const answering = this.#chatting() && turn.transcript.trim();
      this.#status(answering ? "thinking\u2026" : "listening\u2026", "listening");
    }
  }

  // The listening connection is gone.
  deaf(why) {
    this.#hangUp();
    this.fail(why);
  }

  arrived(turnId) {
    if (this.#connection.listening) {
      const ms = this.#turns.arrived(turnId, performance.now());
      if (ms !== null) $("ttfa").textContent = `${ms} ms`; // the last turn's
      return;
    }
    if (this.#report.ttfaMs !== null) return;
    this.#report.ttfaMs = performance.now() - this.#sentAt;
    $("ttfa").textContent = `${this.#report.ttfaMs.toFixed(0)} ms`;
  }

  heard(span) {
    this.#report.spans.push(span);
  }

  goingOn(code) {
    this.#report.resumes += 1;
    this.#status(`the server went away (${code}): going on with another\u2026`, "speaking");
  }

  // Refused for now: the Connection asks again when told. Time to first audio still
  // counts from the click.
  busy(m) {
    this.#report.retries += 1;
    const why = m.code === "server_busy" ? "Server busy (at capacity)" : "Too many streams from this address";
    this.#status(`${why}: retrying in ${(m.retry_after_ms / 1000).toFixed(1)} s (attempt ${this.#report.retries})\u2026`,
      "busy", "busy");
  }

  sent(audioMs) {
    this.#report.audioMs = audioMs;
  }

  received(streamMs) {
    this.#report.received = true;
    this.#status(`received ${(streamMs / 1000).toFixed(1)} s of audio, playing\u2026`, "playing");
  }

  fail(message) {
    this.#report.errors.push(message);
    this.#status(message, "error", "error");
  }

  // What the Audio tells.

  decoded(samples) {
    this.#report.decodedSamples += samples;
    $("decoded").textContent = `${(this.#report.decodedSamples / RATE).toFixed(2)} s`;
  }

  played({ ended, played }) {
    if (ended !== this.#connection.context) return;
    Object.assign(this.#report, { done: true, playedSamples: played, queuedSamples: 0 });
    if (this.#microphone) this.#status("listening\u2026", "listening");
    else this.#status(`done: ${this.#report.audioMs} ms of audio`, "done");
  }

  progress({ level, played, queued }) {
    Object.assign(this.#report, { playedSamples: played, queuedSamples: queued });
    const db = level > 0 ? 20 * Math.log10(level) : null;
    this.#report.level = level > 0 ? Math.min(1, Math.max(0, (db + 60) / 60)) : 0;
    this.#meter.draw(this.#report.level);
  }
}

const page = new Page();
// The page's one global, for the browser tests (tests/browser/test_page.py, tests/browser/test_page_listen.py) and
// a person at the console: what it measured (`fresh` above), a read-only copy at each read.
Object.defineProperty(window, "speechstream", { get: () => page.measured });
