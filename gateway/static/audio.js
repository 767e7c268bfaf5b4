// The page's audio: protocol v1's frames decoded (Opus with WebCodecs, PCM s16le where
// AudioDecoder is missing) and played through the AudioWorklet queue (player-worklet.js).

export const RATE = 48000;
const FRAME = RATE / 50; // samples in a 20 ms Opus frame

// Tells its `listener`: decoded(samples) as samples go to the player; progress({level,
// played, queued}) and played({ended, played}), the player's reports; fail(message).
export class Audio {
  #listener;
  #context = null;
  #player = null;
  #decoder = null;
  #skip = 0; // decoded samples still to drop (heard before a resume)

  constructor(listener) {
    this.#listener = listener;
    this.opus = typeof AudioDecoder === "function";
  }

  // Running, once the page has had a gesture (a browser starts audio suspended).
  async start() {
    if (!this.#context) await this.#create();
    await this.#context.resume();
  }

  async #create() {
    this.#context = new AudioContext({ sampleRate: RATE });
    await this.#context.audioWorklet.addModule("/static/player-worklet.js");
    this.#player = new AudioWorkletNode(this.#context, "queue-player", { outputChannelCount: [1] });
    this.#player.connect(this.#context.destination);
    this.#player.port.onmessage = ({ data }) =>
      ("ended" in data ? this.#listener.played(data) : this.#listener.progress(data));
  }

  // A decoder per context: closing the last one drops the outputs it still owed (clear).
  open() {
    this.#skip = 0;
    if (!this.opus) return;
    this.#decoder = new AudioDecoder({
      output: (data) => {
        const samples = new Float32Array(data.numberOfFrames);
        data.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
        data.close();
        this.#play(samples);
      },
      error: (e) => this.#listener.fail(`decoder: ${e.message}`),
    });
    this.#decoder.configure({ codec: "opus", sampleRate: RATE, numberOfChannels: 1 });
  }

  // Not to play the next `samples` decoded: a resumed stream says again what was heard.
  skip(samples) {
    this.#skip = samples;
  }

  // The samples a frame's payload holds once decoded.
  samplesIn(payload) {
    return this.opus ? FRAME : payload.length / 2;
  }

  decode(offset, payload) {
    if (this.opus) {
      this.#decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: (offset / RATE) * 1e6, data: payload }));
    } else {
      const pcm = new Int16Array(payload.slice().buffer);
      this.#play(Float32Array.from(pcm, (s) => s / 32768));
    }
  }

  // Once all decoded so far has gone to the player (at once without a decoder).
  flush() {
    return this.#decoder ? this.#decoder.flush() : Promise.resolve();
  }

  // Nothing more comes for context `id`: the player answers played({ended: id}) once all is played.
  end(id) {
    this.#player.port.postMessage({ type: "end", id });
  }

  // Stop: drop what the decoder owes and empty the player at once.
  clear() {
    if (this.#decoder && this.#decoder.state !== "closed") this.#decoder.close();
    this.#decoder = null;
    this.#skip = 0;
    if (this.#player) this.#player.port.postMessage({ type: "clear" });
  }

  #play(samples) {
    if (this.#skip > 0) {
      const dropped = Math.min(this.#skip, samples.length);
      this.#skip -= dropped;
      samples = samples.slice(dropped);
      if (!samples.length) return;
    }
    this.#listener.decoded(samples.length);
    this.#player.port.postMessage({ type: "samples", samples }, [samples.buffer]);
  }
}
