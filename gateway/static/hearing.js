// What was heard of a context, to go on with it through another gateway as the client
// library does (docs/protocol.md, "Going on elsewhere when a gateway goes away"): say
// again the text from the last sentence whose first word was heard (every one before it
// was heard whole), and splice the new stream's audio onto what was heard.

import { RATE } from "./audio.js";

export class Hearing {
  constructor(text) {
    this.text = text;
    this.heard = 0; // where the context's audio got to, in samples
    // The sentences whose timestamps came: span in the text, word times in ms as heard,
    // samples heard before them.
    this.sentences = [];
    this.anchor = null; // the sentence the resumed stream starts with
    this.textStart = 0; // where in the text the resumed stream's text starts
    this.told = 0; // the text whose sentences' timestamps came before the resume
    // Where the resumed stream's audio falls: from its sample `cut` on, at `shift` more.
    this.cut = 0;
    this.shift = 0;
  }

  // The gateway went away: the text to say to the next one.
  rest() {
    const heardMs = (this.heard * 1000) / RATE;
    this.anchor = [...this.sentences].reverse().find((s) => s.wordMs[0] + 1 <= heardMs) ?? null; // +1: times are rounded
    this.textStart = this.anchor ? this.anchor.span[0] : 0;
    this.told = this.sentences.at(-1)?.span[1] ?? 0;
    this.cut = null;
    return this.text.slice(this.textStart);
  }

  // Once per resumed stream, at its first frame or timestamps (`m`): where its sample 0
  // falls in what was heard. Its first timestamps, the anchor sentence's again, tell it
  // within a millisecond (all its words' times together); lacking them, the samples heard
  // before the anchor's. Returns the decoded samples to drop (heard already); 0 once placed.
  place(m) {
    if (this.cut !== null) return 0;
    let start = 0;
    if (this.anchor) {
      const again = m ? [...m.start_ms, ...m.end_ms] : [];
      const same = m && m.text_span[0] + this.textStart === this.anchor.span[0]
        && again.length === this.anchor.wordMs.length;
      start = same
        ? Math.round(((this.anchor.wordMs.reduce((sum, t, i) => sum + t - again[i], 0) / again.length) * RATE) / 1000)
        : this.anchor.heardBefore;
    }
    this.cut = Math.max(0, this.heard - start);
    this.shift = this.heard - this.cut;
    return this.cut;
  }

  // A frame of `samples` at `offset` in the current stream.
  frame(offset, samples) {
    this.heard = Math.max(this.heard, offset + samples + this.shift);
  }

  // A sentence's timestamps: its span in the whole text, or null when wordless or told before.
  sentence(m) {
    const span = [m.text_span[0] + this.textStart, m.text_span[1] + this.textStart];
    if (!m.start_ms.length || span[1] <= this.told) return null;
    const shiftMs = (this.shift * 1000) / RATE;
    this.sentences.push({ span, wordMs: [...m.start_ms, ...m.end_ms].map((t) => t + shiftMs), heardBefore: this.heard });
    return span;
  }

  // The stream's audio_ms, in the whole context's time.
  audioMs(streamMs) {
    return streamMs + Math.round((this.shift * 1000) / RATE);
  }
}
