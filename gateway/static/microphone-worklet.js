// The microphone's capture: its audio, at the AudioContext's rate, low-passed and resampled
// to processorOptions.rate (16 kHz, the recognizer's) and posted as PCM s16le messages of
// processorOptions.samples samples each (an ArrayBuffer, transferred), one continuous
// timeline: nothing is skipped, silence included, since the server places the speech by
// counting samples. Resampling here, on the audio thread, works at whatever rate the
// device runs (44.1 or 48 kHz), which a 16 kHz AudioContext fed by a device at another rate
// does not in every browser.
// In: {type: "stop"} (post what is held, then nothing more).

const ZEROS = 8; // zero crossings of the windowed sinc on each side: about -60 dB past the band
const TABLE_STEPS = 64; // the kernel tabulated at 1/64 of an input sample

class MicrophoneCapture extends AudioWorkletProcessor {
  constructor({ processorOptions: { rate, samples } }) {
    super();
    this.step = sampleRate / rate; // input samples per output sample (sampleRate: the context's)
    // A low-pass just under the output's Nyquist frequency (0.45 of its rate), so that what
    // lies above it does not fold back into the speech; its width in input samples:
    const cutoff = Math.min(0.5, 0.45 / this.step); // cycles per input sample
    this.half = Math.ceil(ZEROS / (2 * cutoff));
    this.kernel = new Float32Array(this.half * TABLE_STEPS + 2);
    for (let i = 0; i < this.kernel.length; i++) {
      const x = i / TABLE_STEPS;
      const sinc = x === 0 ? 1 : Math.sin(2 * Math.PI * cutoff * x) / (2 * Math.PI * cutoff * x);
      const window = x >= this.half ? 0 : 0.42 + 0.5 * Math.cos((Math.PI * x) / this.half) + 0.08 * Math.cos((2 * Math.PI * x) / this.half);
      this.kernel[i] = sinc * window;
    }
    this.input = new Float32Array(4096); // the input not used up yet, from input[0]
    // The input starts with half a kernel of silence, so that the first output sample is
    // the input's first.
    this.held = this.half; // samples in `input`
    this.at = this.half; // where the next output sample falls in `input`
    this.samples = samples;
    this.out = new Int16Array(samples);
    this.filled = 0;
    this.stopped = false;
    this.port.onmessage = ({ data }) => {
      if (data.type === "stop") {
        this.#post(this.filled);
        this.stopped = true;
      }
    };
  }

  process(inputs) {
    if (this.stopped) return false;
    // A track not yet started gives no channel: that is silence on the timeline too.
    const channel = inputs[0]?.[0] ?? new Float32Array(128);
    this.#append(channel);
    while (this.at + this.half < this.held) {
      this.#emit(this.#sample(this.at));
      this.at += this.step;
    }
    // Drop what no later output sample reaches.
    const used = Math.floor(this.at) - this.half;
    if (used > 0) {
      this.input.copyWithin(0, used, this.held);
      this.held -= used;
      this.at -= used;
    }
    return true;
  }

  #append(channel) {
    if (this.held + channel.length > this.input.length) {
      const grown = new Float32Array(2 * (this.held + channel.length));
      grown.set(this.input.subarray(0, this.held));
      this.input = grown;
    }
    this.input.set(channel, this.held);
    this.held += channel.length;
  }

  // The filtered signal at fractional position t, the kernel's weights normalized so that
  // a constant comes out unchanged whatever the phase.
  #sample(t) {
    let sum = 0, weights = 0;
    for (let k = Math.ceil(t - this.half); k <= Math.floor(t + this.half); k++) {
      const w = this.kernel[Math.round(Math.abs(t - k) * TABLE_STEPS)];
      sum += w * this.input[k];
      weights += w;
    }
    return sum / weights;
  }

  #emit(s) {
    this.out[this.filled++] = Math.max(-32768, Math.min(32767, Math.round(s * 32767)));
    if (this.filled === this.samples) this.#post(this.samples);
  }

  // Int16Array is the platform's byte order: little-endian wherever browsers run.
  #post(count) {
    if (!count) return;
    const pcm = this.out.slice(0, count);
    this.port.postMessage(pcm.buffer, [pcm.buffer]);
    this.filled = 0;
  }
}
registerProcessor("microphone-capture", MicrophoneCapture);
