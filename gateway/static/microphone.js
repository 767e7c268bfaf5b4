// The page's microphone for listen mode: getUserMedia's audio, with the browser's echo
// cancellation (the reply plays from the speakers while the microphone stays open: without
// it the recognizer would hear the reply and barge in on it) and noise suppression,
// resampled to 16 kHz PCM s16le by the capture worklet (microphone-worklet.js) in 20 ms
// messages; and the Timeline of what was sent, to place the end of speech in wall-clock time.

export const MIC_RATE = 16000; // the recognizer's rate: the server resamples nothing
const MESSAGE_MS = 20;

// Why getUserMedia failed, in words a person can act on.
function refusal(e) {
  if (e.name === "NotAllowedError" || e.name === "SecurityError") {
    return "The browser refused the microphone: allow it for this page (the address bar's site settings), then press Talk.";
  }
  if (e.name === "NotFoundError" || e.name === "OverconstrainedError") return "No microphone was found.";
  if (!navigator.mediaDevices) return "This page cannot use a microphone here: open it over https or at 127.0.0.1/localhost.";
  return `The microphone could not start: ${e.message}`;
}

export class Microphone {
  #stream;
  #context;
  #capture = null;

  constructor(stream, context) {
    this.#stream = stream;
    this.#context = context;
  }

  // Asks for the microphone; rejects with why, in words, when it is refused or missing.
  static async open() {
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
    } catch (e) {
      throw new Error(refusal(e));
    }
    // A context of its own at the device's rate: the player's runs at 48 kHz for Opus.
    const context = new AudioContext();
    try {
      await context.audioWorklet.addModule("/static/microphone-worklet.js");
    } catch (e) {
      stream.getTracks().forEach((t) => t.stop());
      await context.close();
      throw e;
    }
    return new Microphone(stream, context);
  }

  // Each message (an ArrayBuffer of PCM s16le at MIC_RATE) to `send`, from now on.
  async start(send) {
    this.#capture = new AudioWorkletNode(this.#context, "microphone-capture", {
      numberOfInputs: 1, numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit",
      processorOptions: { rate: MIC_RATE, samples: (MIC_RATE * MESSAGE_MS) / 1000 },
    });
    this.#capture.port.onmessage = ({ data }) => send(data);
    this.#context.createMediaStreamSource(this.#stream).connect(this.#capture);
    await this.#context.resume();
  }

  // The device released (its light goes off) and the capture ended; nothing more is sent.
  stop() {
    if (this.#capture) {
      this.#capture.port.onmessage = null;
      this.#capture.port.postMessage({ type: "stop" });
    }
    this.#stream.getTracks().forEach((t) => t.stop());
    this.#context.close();
  }
}

// The microphone's timeline as sent: when each message went out, by the samples sent up to
// its end, so that a place in the timeline (a speech_stopped's audio_ms) has a wall-clock time.
export class Timeline {
  #ends = []; // [samples sent up to the message's end, performance.now() when it went out]
  #samples = 0;

  sent(samples, at) {
    this.#samples += samples;
    this.#ends.push([this.#samples, at]);
  }

  get sentMs() {
    return (this.#samples * 1000) / MIC_RATE;
  }

  // When the speech that ended at `audioMs` (exclusive) went out: the message holding its
  // last sample; null if it was not sent. Turns come in order, so what lies before is forgotten.
  sentAt(audioMs) {
    const sample = Math.max(0, Math.ceil((audioMs * MIC_RATE) / 1000) - 1);
    const i = this.#ends.findIndex(([end]) => end > sample);
    if (i < 0) return null;
    const at = this.#ends[i][1];
    this.#ends.splice(0, i);
    return at;
  }
}
