"""Resuming a context on another connection, sans I/O: what a context sent and what its
listener got (`Progress`), and how it goes on where a gateway went away, closed with one
of RESUMABLE_CLOSES (`Splice`). The asyncio client drives it (`SpeechClient.connect(...,
resume=True)`); this is the one place its rule lives.

The server cuts a context's text into sentences and synthesizes each whole, and with
a seed a sentence's noise depends on its text alone: spoken again, on any gateway in
front of the same voice, a sentence sounds the same. So a context resumes at the start
of a sentence (its anchor) whose end the listener may not have heard, every sentence
before it heard whole: its text from there goes to the new connection, and the resumed
audio is put on the listener's timeline by that sentence's first word, heard at
`start_ms[0]` in both contexts' `timestamps`. What the listener heard already is
skipped: to the sample in PCM and G.711, to the nearest packet in Opus.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, replace
from typing import Any

from speechstream import protocol as v1
from speechstream.client.events import Event, frame_samples

# Close codes after which the same speech goes on over a new connection: going away (a
# gateway that drained), service restart. Any other close ends the contexts with an error.
RESUMABLE_CLOSES = (1001, 1012)


@dataclass(frozen=True)
class Anchor:
    """The start of a sentence, as its `timestamps` placed it for the listener. The
    default is the context's start."""

    span: tuple[int, int] | None = None  # the sentence's text_span in all the text sent; None: the start
    word_ms: tuple[int, ...] = ()  # its words' start_ms, then their end_ms, in the listener's audio
    frames_before: int = 0  # frames received before its `timestamps`: it starts within a frame after them

    @property
    def text_start(self) -> int:
        return 0 if self.span is None else self.span[0]


class Progress:
    """One context as its client saw it, sans I/O: what was sent to it, and what its
    listener got, on the listener's timeline (the events after any `Splice`). Enough to
    resume it on another connection (`resume`) so that the listener hears every word
    once. `ready`: the connection's (its format and rate hold on every connection)."""

    def __init__(self, ready: dict) -> None:
        self.ready = ready
        self.text = ""  # all the text sent, in code points as the server counts text_span
        self.flushes: list[int] = []  # where in `text` each `flush` was sent
        self.closed = False  # `speak` or `close` sent: the input is complete
        self.cancelled = False
        self.opening: dict[str, Any] = {}  # the voice and parameters the opening message carried
        self.voice: str | None = None  # the voice it speaks with, from `audio_start`
        self.heard = 0  # where the last frame received ends, in samples
        self.frames = 0  # frames received: the next frame's seq
        self.flushed = 0  # `flushed` messages received
        self.sentences: list[Anchor] = []  # the starts of the sentences whose `timestamps` came

    def sent(self, kind: str, text: str = "", **voice: Any) -> None:
        """Record a message sent to the context (`speak`, `text`, `flush`, `close`, `cancel`)."""
        if not self.text and text:
            self.opening = voice
        self.text += text
        if kind == "flush":
            self.flushes.append(len(self.text))
        self.closed |= kind in ("speak", "close")
        self.cancelled |= kind == "cancel"

    def received(self, event: Event) -> None:
        """Record an event of the context, as its listener gets it."""
        if event.frame is not None:
            self.heard = event.frame.sample_offset + frame_samples(event.frame, self.ready)
            self.frames = event.frame.seq + 1
        elif event.kind == "audio_start":
            self.voice = event.message.get("voice")
        elif event.kind == "flushed":
            self.flushed += 1
        elif event.kind == "timestamps" and event.message["start_ms"]:
            m = event.message
            self.sentences.append(Anchor(tuple(m["text_span"]), (*m["start_ms"], *m["end_ms"]), self.frames))

    @property
    def anchor(self) -> Anchor:
        """Where the context resumes: the last sentence whose first word the listener
        heard. A sentence starts before its first word, so every sentence before it was
        heard whole; the end of one whose `timestamps` came may still have been in the
        server's resampler or last partial frame."""
        heard_ms = self.heard * 1000 / self.ready["sample_rate"]
        # +1: start_ms is rounded to the millisecond.
        return next((s for s in reversed(self.sentences) if s.word_ms[0] + 1 <= heard_ms), Anchor())

    def resume(self) -> list[dict[str, Any]]:
        """The messages (without `context_id`) that open the context again on a new
        connection and say what its listener has not heard whole: the text from the
        anchor's sentence on, with the flushes and the close that came after it. The
        first carries the opening's voice and parameters."""
        start = self.anchor.text_start
        messages: list[dict[str, Any]] = []
        for begin, end in itertools.pairwise([start, *(f for f in self.flushes if f > start), None]):
            if self.text[begin:end]:
                messages.append({"type": "text", "text": self.text[begin:end]})
            if end is not None:
                messages.append({"type": "flush"})
        if messages and self.closed:
            messages.append({"type": "close"})
        if messages:
            messages[0].update(self.opening)
        return messages

    def splice(self) -> Splice:
        """What puts the resumed context's events (after `resume`) on this listener's timeline."""
        anchor = self.anchor
        answered = sum(1 for f in self.flushes if f <= anchor.text_start)  # their `flushed` came before the anchor's audio
        told = self.sentences[-1].span[1] if self.sentences else 0
        return Splice(anchor, self.heard, self.frames, self.flushed - answered, told, self.ready)


class Splice:
    """A resumed context's events, sans I/O, as its listener goes on: the audio heard
    already is dropped, the rest continues the sample offsets and frame numbers; the
    `timestamps` say where in all the context's text and audio, those told already
    dropped, as are the `flushed` answered already; `done` counts all the audio."""

    def __init__(self, anchor: Anchor, heard: int, frames: int, flushed: int, told: int, ready: dict) -> None:
        self._anchor = anchor
        self._heard = heard
        self._seq = frames
        self._flushed = flushed  # `flushed` the listener has had already
        self._told = told  # the listener had the timestamps of the sentences ending here or before
        self._ready = ready
        self._bytes = v1.BYTES_PER_SAMPLE.get(ready["format"])  # per sample; None: Opus, whole packets
        self._cut: int | None = None  # the first resumed sample the listener gets
        self._shift = 0  # a resumed sample's place on the listener's timeline, less its own

    def event(self, event: Event) -> Event | None:
        """The event as the listener gets it, or None where it has had it already."""
        if event.frame is not None:
            return self._frame(event)
        if event.kind == "timestamps":
            return self._timestamps(event)
        if event.kind == "flushed" and self._flushed:
            self._flushed -= 1
            return None
        if event.kind == "done":
            self._place(None)
            audio_ms = event.message["audio_ms"] + round(self._shift * 1000 / self._ready["sample_rate"])
            return replace(event, message=event.message | {"audio_ms": audio_ms})
        return event

    def _place(self, timestamps: dict | None) -> None:
        """Once: where the resumed audio's sample 0 falls on the listener's timeline, and
        so what of it was heard already. Its first `timestamps`, the anchor's sentence's
        again, tell it within a millisecond (each time is rounded to one, so all its
        words' together); lacking them, the frames received before the anchor's tell it
        to a frame."""
        if self._cut is not None:
            return
        anchor, rate = self._anchor, self._ready["sample_rate"]
        packet = rate * self._ready["frame_ms"] // 1000
        again = (*timestamps["start_ms"], *timestamps["end_ms"]) if timestamps else ()
        if anchor.span is None:
            start = 0
        elif timestamps and self._span(timestamps) == anchor.span and len(again) == len(anchor.word_ms):
            start = round(statistics.fmean(a - b for a, b in zip(anchor.word_ms, again)) * rate / 1000)
        else:
            start = anchor.frames_before * packet
        heard = max(0, self._heard - start)
        if self._bytes is None:  # a packet is played whole or not at all: the nearer end
            heard = round(heard / packet) * packet
        self._cut, self._shift = heard, self._heard - heard

    def _span(self, timestamps: dict) -> tuple[int, int]:
        a, b = timestamps["text_span"]
        return a + self._anchor.text_start, b + self._anchor.text_start

    def _frame(self, event: Event) -> Event | None:
        self._place(None)
        frame = event.frame
        if frame.sample_offset + frame_samples(frame, self._ready) <= self._cut:
            return None
        payload = frame.payload
        if frame.sample_offset < self._cut:  # PCM: heard up to a sample inside it
            payload = payload[(self._cut - frame.sample_offset) * self._bytes * self._ready["channels"]:]
        seq, self._seq = self._seq, self._seq + 1
        offset = max(frame.sample_offset, self._cut) + self._shift
        return replace(event, frame=replace(frame, seq=seq, sample_offset=offset, payload=payload))

    def _timestamps(self, event: Event) -> Event | None:
        m = event.message
        self._place(m)
        span = self._span(m)
        if span[1] <= self._told:
            return None
        shift_ms = self._shift * 1000 / self._ready["sample_rate"]
        return replace(event, message=m | {
            "text_span": list(span),
            "start_ms": [round(t + shift_ms) for t in m["start_ms"]],
            "end_ms": [round(t + shift_ms) for t in m["end_ms"]],
        })
