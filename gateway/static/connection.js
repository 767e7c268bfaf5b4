// The page's protocol v1 connection: one WebSocket, one context at a time (a text's, or
// a chat turn's reply), its audio frames to the page's Audio; a context refused while the
// server is busy is asked again when it says to, and one whose gateway goes away (1001: it
// stopped; 1012: it restarts) goes on through another (hearing.js).

import { RATE } from "./audio.js";
import { Hearing } from "./hearing.js";

const RESUMABLE = [1001, 1012];
const RESUME_TRIES = 5; // the first at once, then after 0.2, 0.4, 0.8, 1.6 s

// Its `page` answers settings() → {key, voice: the config's voice and chat fields} and
// whyRefused(key) → why a handshake was refused, in words; and is told of the current
// context: speaking(), sent to the server; message(m), each of its messages; arrived(), each
// of its audio frames; heard(span), each sentence heard, once, in order; goingOn(code), its
// gateway went away; busy(m), refused for now; sent(audioMs), all sent (audioMs across
// resumes); received(streamMs), all decoded too (streamMs: the last stream's); fail(message).
export class Connection {
  #audio;
  #page;
  // A seed of its own makes a sentence said again elsewhere sound the same.
  #seed = Math.floor(Math.random() * 2 ** 31);
  #ws = null;
  #connectedTo = "";
  #lastId = 0; // contexts and turns are numbered in one sequence
  #text = ""; // the text being spoken
  #turn = null; // the chat question being typed (its turn_id), until final
  #current = null; // the context being spoken or played, or null
  #stream = null; // its audio frames' stream number, from audio_start
  #streaming = false; // the server is still sending `current`: halt must cancel it
  #hearing = null; // what was heard of `current` in speak mode, to resume it elsewhere

  constructor(audio, page) {
    this.#audio = audio;
    this.#page = page;
  }

  get context() {
    return this.#current;
  }

  get asking() {
    return this.#turn !== null;
  }

  // Ready to send: the audio running, the connection open with the config wanted now.
  async prepare() {
    await this.#audio.start();
    const target = this.#target();
    if (!this.#ws || this.#connectedTo !== target.url + target.config) await this.#connect(target);
  }

  speak(text) {
    this.#audio.open();
    this.#text = text;
    this.#send();
  }

  // Chat: the question so far; `final` sends it as the user's last word, and its reply
  // plays as a context named by the turn.
  ask(text, final) {
    const id = (this.#turn ??= `t${++this.#lastId}`);
    if (final) {
      this.#turn = null;
      this.#hearing = null; // a turn does not resume: the conversation was the old connection's
      this.#audio.open();
      this.#current = id;
      this.#streaming = true;
    }
    this.#ws.send(JSON.stringify({ type: "user", turn_id: id, text, final }));
  }

  // Cancel what the server still sends, forget the context, and empty the player.
  halt() {
    if (this.#streaming && this.#ws) this.#ws.send(JSON.stringify({ type: "cancel", context_id: this.#current }));
    this.#streaming = false;
    this.#current = this.#stream = this.#hearing = null;
    this.#audio.clear();
  }

  // Voice parameters are part of a connection's config, and the key part of its URL, so
  // new values of either mean a new connection. `timestamps` say where sentences start.
  #target() {
    const { key, voice } = this.#page.settings();
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/stream`
      + (key ? `?api_key=${encodeURIComponent(key)}` : ""); // a browser cannot set headers on a WebSocket
    const config = JSON.stringify({
      type: "config", format: this.#audio.opus ? "opus" : "pcm_s16le", sample_rate: RATE, seed: this.#seed,
      timestamps: true, ...voice,
    });
    return { key, url, config };
  }

  #connect({ key, url, config }) {
    if (this.#ws) this.#ws.close();
    this.#connectedTo = "";
    return new Promise((resolve, reject) => {
      const socket = (this.#ws = new WebSocket(url));
      socket.binaryType = "arraybuffer";
      let opened = false;
      socket.onopen = () => {
        opened = true;
        socket.send(config);
        this.#connectedTo = url + config;
        resolve();
      };
      socket.onclose = ({ code }) => {
        if (!opened) return this.#page.whyRefused(key).then((why) => reject(new Error(why))); // the handshake was refused
        if (this.#ws === socket) this.#closed(code);
      };
      socket.onmessage = ({ data }) =>
        (typeof data === "string" ? this.#onMessage(JSON.parse(data)) : this.#onAudio(data));
    });
  }

  #closed(code) {
    this.#ws = null;
    if (this.#streaming && this.#hearing && RESUMABLE.includes(code)) return this.#resume(code);
    if (this.#streaming) {
      this.#streaming = false;
      this.#page.fail(`the connection to the server closed (${code})`);
    }
  }

  #onMessage(m) {
    const id = m.context_id ?? m.turn_id; // a chat turn's reply and reply_text name the turn
    if (id !== undefined && id !== this.#current) return; // a stopped context's last words
    this.#page.message(m);
    if (m.type === "audio_start") this.#stream = m.stream;
    if (m.type === "timestamps" && this.#hearing) this.#heardSentence(m);
    if (m.type === "error" && m.retry_after_ms && m.context_id) return this.#retryLater(m);
    if (m.type === "error") {
      if (m.context_id) this.#streaming = false; // an error for a context ends it
      this.#page.fail(`${m.code}: ${m.message}`);
    }
    if (m.type === "done") this.#done(m);
  }

  // All sent. Once all is decoded too, the player is told that nothing more comes; the
  // context is done when the player says it has played it all.
  #done(m) {
    const id = this.#current;
    this.#streaming = false;
    this.#page.sent(this.#hearing ? this.#hearing.audioMs(m.audio_ms) : m.audio_ms);
    this.#audio.flush().then(() => {
      if (this.#current !== id) return;
      this.#page.received(m.audio_ms);
      this.#audio.end(id);
    }, (e) => this.#current === id && this.#page.fail(`decoder: ${e.message}`));
  }

  #onAudio(buffer) {
    const view = new DataView(buffer);
    if (view.getUint16(2, true) !== this.#stream) return; // sent before a Stop reached the server
    const offset = view.getUint32(8, true);
    this.#page.arrived();
    const payload = new Uint8Array(buffer, 12);
    if (this.#hearing) {
      this.#place(null);
      this.#hearing.frame(offset, this.#audio.samplesIn(payload));
    }
    this.#audio.decode(offset, payload);
  }

  #heardSentence(m) {
    this.#place(m);
    const span = this.#hearing.sentence(m);
    if (span) this.#page.heard(span);
  }

  #place(m) {
    const drop = this.#hearing.place(m);
    if (drop) this.#audio.skip(drop);
  }

  #send() {
    this.#page.speaking();
    this.#current = `c${++this.#lastId}`;
    this.#streaming = true;
    this.#hearing = new Hearing(this.#text);
    this.#ws.send(JSON.stringify({ type: "speak", context_id: this.#current, text: this.#text }));
  }

  // The gateway went away mid-context: connect again and say the rest.
  async #resume(code) {
    const id = this.#current, hearing = this.#hearing;
    this.#page.goingOn(code);
    await this.#audio.flush().catch(() => {}); // what the old stream owes plays first
    const rest = hearing.rest();
    for (let i = 0; this.#current === id; i++) {
      try {
        await this.#connect(this.#target());
        break;
      } catch (e) {
        if (i + 1 === RESUME_TRIES) {
          this.#streaming = false;
          return this.#page.fail(`could not resume: ${e.message}`);
        }
        await new Promise((wake) => setTimeout(wake, 200 * 2 ** i));
      }
    }
    if (this.#current !== id) return; // stopped meanwhile
    this.#audio.open();
    this.#ws.send(JSON.stringify({ type: "speak", context_id: id, text: rest }));
  }

  // The server is busy (or this address has all the streams it may): try again when it
  // says to.
  #retryLater(m) {
    const refused = this.#current;
    this.#streaming = false; // refused: there is nothing to cancel
    this.#page.busy(m);
    setTimeout(() => { if (this.#current === refused && this.#ws) this.#send(); }, m.retry_after_ms);
  }
}
