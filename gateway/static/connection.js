// The page's protocol v1 connection: one WebSocket, one context at a time (a text's, or
// a chat turn's reply), its audio frames to the page's Audio; a context refused while the
// server is busy is asked again when it says to, and one whose gateway goes away (1001: it
// stopped; 1012: it restarts) goes on through another (hearing.js). In listen mode it
// carries the microphone's audio up, and each spoken turn's reply down as the context of
// its turn_id, the server's.

import { RATE } from "./audio.js";
import { Hearing } from "./hearing.js";
import { MIC_RATE, Timeline } from "./microphone.js";

const RESUMABLE = [1001, 1012];
const RESUME_TRIES = 5; // the first at once, then after 0.2, 0.4, 0.8, 1.6 s
const HEARD = ["speech_started", "transcript", "speech_stopped"]; // listen mode's, named by turn_id
const REPLY_OPENS = ["reply", "reply_text", "audio_start"]; // a spoken turn's reply, whichever comes first

// Its `page` answers settings() → {key, voice: the config's voice and chat fields} and
// whyRefused(key) → why a handshake was refused, in words; and is told of the current
// context: speaking(), sent to the server; message(m), each of its messages; arrived(), each
// of its audio frames; heard(span), each sentence heard, once, in order; goingOn(code), its
// gateway went away; busy(m), refused for now; sent(audioMs), all sent (audioMs across
// resumes); received(streamMs), all decoded too (streamMs: the last stream's); fail(message).
// In listen mode: listened(m, endedAt), each of speech_started, transcript and
// speech_stopped (endedAt: for speech_stopped, when the speech's last sample was sent, in
// performance.now() time); arrived(turnId), each frame of a turn's reply; deaf(why), the
// connection is gone.
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
  #listening = null; // listen mode: the Timeline of the microphone's audio sent, or null
  #replied = new Set(); // listen mode: the turns whose replies came, so that a late message reopens none
  #configured = null; // while a config waits for its `ready`: {resolve, reject, readies}

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

  get listening() {
    return this.#listening !== null;
  }

  // The microphone's audio sent on this listening connection, in ms.
  get sentMs() {
    return this.#listening?.sentMs ?? 0;
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

  // Cancel what the server still sends, forget the context, and empty the player. A
  // listening connection stops listening: a new one is a new timeline.
  halt() {
    if (this.#streaming && this.#ws) this.#ws.send(JSON.stringify({ type: "cancel", context_id: this.#current }));
    this.#streaming = false;
    this.#current = this.#stream = this.#hearing = null;
    this.#audio.clear();
    if (this.#listening) {
      this.#listening = null;
      this.#ws?.close();
      this.#ws = null;
      this.#connectedTo = "";
    }
  }

  // Listen mode: a connection of its own, so that the microphone's timeline starts at 0,
  // whose config asks for `listen` (with `chat` when the page chats); resolves once the
  // server took the config, rejects with why it did not (listen_unavailable: it runs no
  // recognizer).
  async listen() {
    this.halt();
    await this.#audio.start();
    const target = this.#target({ listen: { format: "pcm_s16le", sample_rate: MIC_RATE } });
    const configured = new Promise((resolve, reject) => (this.#configured = { resolve, reject, readies: 0 }));
    configured.catch(() => {}); // a refused handshake rejects both: #connect's is the one thrown
    try {
      await this.#connect(target);
      await configured;
    } catch (e) {
      this.#configured = null;
      this.#ws?.close(); // not listening: of no use
      this.#ws = null;
      this.#connectedTo = "";
      throw e;
    }
    this.#listening = new Timeline();
    this.#replied.clear();
  }

  // A microphone message (PCM s16le at MIC_RATE), and when it went out.
  hear(pcm) {
    if (!this.#listening || this.#ws?.readyState !== WebSocket.OPEN) return;
    this.#ws.send(pcm);
    this.#listening.sent(pcm.byteLength / 2, performance.now());
  }

  // Push-to-talk: the turn ends now, without waiting for the silence after it.
  endOfSpeech() {
    if (this.#listening && this.#ws) this.#ws.send(JSON.stringify({ type: "end_of_speech" }));
  }

  // Voice parameters are part of a connection's config, and the key part of its URL, so
  // new values of either mean a new connection. `timestamps` say where sentences start.
  #target(extra = {}) {
    const { key, voice } = this.#page.settings();
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/stream`
      + (key ? `?api_key=${encodeURIComponent(key)}` : ""); // a browser cannot set headers on a WebSocket
    const config = JSON.stringify({
      type: "config", format: this.#audio.opus ? "opus" : "pcm_s16le", sample_rate: RATE, seed: this.#seed,
      timestamps: true, ...voice, ...extra,
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
        if (!opened) {
          // the handshake was refused
          return this.#page.whyRefused(key).then((why) => {
            this.#configured?.reject(new Error(why));
            reject(new Error(why));
          });
        }
        if (this.#ws === socket) this.#closed(code);
      };
      socket.onmessage = ({ data }) =>
        (typeof data === "string" ? this.#onMessage(JSON.parse(data)) : this.#onAudio(data));
    });
  }

  #closed(code) {
    this.#ws = null;
    if (this.#configured) this.#configured.reject(new Error(`the connection to the server closed (${code})`));
    this.#configured = null;
    if (this.#listening) {
      this.#listening = null;
      this.#page.deaf(`the connection to the server closed (${code})`);
    }
    if (this.#streaming && this.#hearing && RESUMABLE.includes(code)) return this.#resume(code);
    if (this.#streaming) {
      this.#streaming = false;
      this.#page.fail(`the connection to the server closed (${code})`);
    }
  }

  #onMessage(m) {
    if (this.#configured && this.#answersConfig(m)) return;
    if (this.#listening && HEARD.includes(m.type)) return this.#heard(m);
    const id = m.context_id ?? m.turn_id; // a chat turn's reply and reply_text name the turn
    if (this.#listening && REPLY_OPENS.includes(m.type) && !this.#replied.has(id)) this.#replyOpens(id);
    // A spoken turn refused before its reply opened (server_busy, say): said, and listening goes on.
    if (this.#listening && m.type === "error" && id !== undefined && id !== this.#current) {
      return this.#page.fail(`${m.code}: ${m.message}`);
    }
    if (id !== undefined && id !== this.#current) return; // a stopped context's last words
    this.#page.message(m);
    if (m.type === "audio_start") this.#stream = m.stream;
    if (m.type === "cancelled" && this.#listening) this.#bargedIn();
    if (m.type === "timestamps" && this.#hearing) this.#heardSentence(m);
    if (m.type === "error" && m.retry_after_ms && m.context_id && !this.#listening) return this.#retryLater(m);
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

  // A listen config is answered by the second `ready` (the first greets the connection),
  // or refused by an error for no context. True when `m` was that answer.
  #answersConfig(m) {
    const waiting = this.#configured;
    if (m.type === "ready" && ++waiting.readies === 2) waiting.resolve();
    else if (m.type === "error" && !m.context_id) waiting.reject(Object.assign(new Error(m.message), { code: m.code }));
    else return m.type === "ready";
    this.#configured = null;
    return true;
  }

  // What the recognizer heard; a speech_stopped's audio_ms placed in wall-clock time.
  #heard(m) {
    const endedAt = m.type === "speech_stopped" ? this.#listening.sentAt(m.audio_ms) : null;
    this.#page.listened(m, endedAt);
  }

  // A spoken turn's reply begins: it is the context now. A reply still playing is left to
  // play (had it been cut, its `cancelled` would have come first).
  #replyOpens(id) {
    this.#replied.add(id);
    this.#audio.open();
    this.#current = id;
    this.#stream = null;
    this.#streaming = true;
  }

  // Barge-in: the server cancelled the reply (it may have sent all of it already, to be
  // played still): what is queued of it goes now, and nothing of it is current any more
  // (its decoder's flush, cut short by the clear, is no error).
  #bargedIn() {
    this.#streaming = false;
    this.#current = this.#stream = null;
    this.#audio.clear();
  }

  #onAudio(buffer) {
    const view = new DataView(buffer);
    if (view.getUint16(2, true) !== this.#stream) return; // sent before a Stop reached the server
    const offset = view.getUint32(8, true);
    this.#page.arrived(this.#current);
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
