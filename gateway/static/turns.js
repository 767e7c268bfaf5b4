// Listen mode's turns as the page shows and reports them: what was heard (partials grey,
// the final black), the reply's text as it comes, and the voice-to-voice latency: from the
// moment the page sent the last sample of the speech (the speech_stopped's audio_ms in its
// own timeline, placed by connection.js) to the first audio frame of the reply.

export class Turns {
  #list;
  #shown = new Map(); // turn_id → its <li>'s parts
  #endedAt = new Map(); // turn_id → when its speech's last sample was sent (performance.now())

  // `records` is the report's: [{turn_id, transcript, final, partials (how many were
  // shown), reply, outcome, cancelled, voice_to_voice_ms}].
  constructor(list, records) {
    this.#list = list;
    this.records = records;
  }

  clear(records) {
    this.records = records;
    this.#shown.clear();
    this.#endedAt.clear();
    this.#list.replaceChildren();
  }

  #turn(id) {
    let record = this.records.find((t) => t.turn_id === id);
    if (record) return record;
    record = {
      turn_id: id, transcript: "", final: false, partials: 0, reply: null, outcome: null, cancelled: false,
      voice_to_voice_ms: null,
    };
    this.records.push(record);
    const li = document.createElement("li");
    const said = Object.assign(document.createElement("span"), { className: "said partial" });
    const latency = Object.assign(document.createElement("span"), { className: "stats" });
    const answer = Object.assign(document.createElement("div"), { className: "answer" });
    li.dataset.turn = id;
    li.append(said, " ", latency, answer);
    this.#list.append(li);
    this.#shown.set(id, { li, said, latency, answer });
    return record;
  }

  // speech_started, transcript, speech_stopped (with `endedAt`).
  heard(m, endedAt) {
    const record = this.#turn(m.turn_id), shown = this.#shown.get(m.turn_id);
    if (m.type === "transcript") {
      Object.assign(record, { transcript: m.text, final: m.final, partials: record.partials + !m.final });
      shown.said.textContent = m.text || (m.final ? "(nothing heard)" : "");
      shown.said.className = `said ${m.final ? "final" : "partial"}`;
    }
    if (m.type === "speech_stopped" && endedAt !== null) this.#endedAt.set(m.turn_id, endedAt);
    return record;
  }

  // A message of a turn's reply: reply (its outcome), reply_text (a delta), cancelled (barge-in).
  replied(m) {
    const id = m.turn_id ?? m.context_id;
    if (!this.records.some((t) => t.turn_id === id)) return;
    const record = this.#turn(id), shown = this.#shown.get(id);
    if (m.type === "reply") record.outcome = m.outcome;
    if (m.type === "reply_text") shown.answer.textContent = record.reply = (record.reply ?? "") + m.text;
    if (m.type === "cancelled") {
      record.cancelled = true;
      shown.answer.classList.add("cut");
    }
  }

  // A frame of turn `id`'s reply arrived (`at`, performance.now()): the first one gives
  // the voice-to-voice latency, returned then (null for the others).
  arrived(id, at) {
    const record = this.records.find((t) => t.turn_id === id);
    if (!record || record.voice_to_voice_ms !== null || !this.#endedAt.has(id)) return null;
    record.voice_to_voice_ms = Math.round(at - this.#endedAt.get(id));
    this.#shown.get(id).latency.textContent = `voice-to-voice ${record.voice_to_voice_ms} ms`;
    return record.voice_to_voice_ms;
  }
}
