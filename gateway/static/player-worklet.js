// A ring buffer that the page fills with decoded samples and the audio thread drains.
// "clear" empties it at once (Stop). Reports the level of what it plays.
class RingPlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    this.ring = new Float32Array(48000 * 60);
    this.read = 0;
    this.write = 0;
    this.frames = 0;
    this.port.onmessage = ({ data }) => {
      if (data.type === "clear") {
        this.read = this.write;
      } else if (data.type === "samples") {
        for (const s of data.samples) {
          this.ring[this.write % this.ring.length] = s;
          this.write++;
        }
      }
    };
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    let sum = 0;
    for (let i = 0; i < out.length; i++) {
      const s = this.read < this.write ? this.ring[this.read++ % this.ring.length] : 0;
      out[i] = s;
      sum += s * s;
    }
    if (++this.frames % 4 === 0) {
      this.port.postMessage({ level: Math.sqrt(sum / out.length), buffered: this.write - this.read });
    }
    return true;
  }
}
registerProcessor("ring-player", RingPlayer);
