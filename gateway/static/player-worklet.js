// The player: a queue of decoded chunks that the page fills and the audio thread drains.
// A queue rather than a fixed ring: the server sends faster than real time, so a long
// text arrives well before it is played, and a ring would overwrite what is not played
// yet. It holds everything sent (48 kHz float: about 11.5 MB per minute of speech).
// In:  {type: "samples", samples}, {type: "clear"} (Stop: empty it at once),
//      {type: "end", id} (nothing more comes: answer {ended: id, played} once all is played).
// Out: every REPORT_BLOCKS blocks, {level (RMS of those blocks), played, queued},
//      counted in samples since the last clear. Once silent it reports for QUIET_AFTER
//      more (the page's meter scrolls back to zero meanwhile), then stops until it plays
//      again, so that an idle page costs nothing.
const REPORT_BLOCKS = 8; // 8 × 128 samples: about 21 ms at 48 kHz
const QUIET_AFTER = 250; // reports: about 5 s

class QueuePlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    this.clear();
    this.blocks = 0;
    this.sum = 0;
    this.count = 0;
    this.port.onmessage = ({ data }) => {
      if (data.type === "samples" && data.samples.length) {
        this.chunks.push(data.samples);
        this.queued += data.samples.length;
      } else if (data.type === "clear") {
        this.clear();
      } else if (data.type === "end") {
        this.end = data.id;
      }
    };
  }

  clear() {
    this.chunks = [];
    this.offset = 0; // read position in chunks[0]
    this.queued = 0;
    this.played = 0;
    this.end = null;
    this.silent = 0; // reports in a row with nothing played: report the clear too
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    for (let i = 0; i < out.length; i++) {
      let s = 0;
      if (this.chunks.length) {
        const chunk = this.chunks[0];
        s = chunk[this.offset++];
        if (this.offset === chunk.length) {
          this.chunks.shift();
          this.offset = 0;
        }
        this.queued--;
        this.played++;
      }
      out[i] = s;
      this.sum += s * s;
    }
    this.count += out.length;
    if (this.end !== null && !this.chunks.length) {
      this.port.postMessage({ ended: this.end, played: this.played });
      this.end = null;
    }
    if (++this.blocks % REPORT_BLOCKS === 0) {
      this.silent = this.sum === 0 && !this.queued ? this.silent + 1 : 0;
      if (this.silent <= QUIET_AFTER) {
        this.port.postMessage({ level: Math.sqrt(this.sum / this.count), played: this.played, queued: this.queued });
      }
      this.sum = 0;
      this.count = 0;
    }
    return true;
  }
}
registerProcessor("queue-player", QueuePlayer);
