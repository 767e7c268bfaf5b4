"""The sans-I/O core both clients share: what each received message or audio frame
means, and which context it belongs to.

- `Router`: each received WebSocket message → an `Event` naming its context, stamped
  with its arrival time (`time.perf_counter()`).
- `SpeechError`: an `error` message, or the client's own codes beside the server's.
- `frame_samples`, `audio_end_s`: where a frame's audio lies, given the connection's `ready`.
- `heard`: listen mode's events typed (`SpeechStarted`, `Transcript`, `SpeechStopped`),
  and `Microphone`, the timeline of the audio sent, for voice-to-voice latency.
"""

from __future__ import annotations

import bisect
import json
import struct
import time
from dataclasses import dataclass
from typing import Union

from speechstream import protocol as v1

# A context ends, for a client, with its `done`, its `cancelled`, or an `error` naming it.
ENDING = ("done", "cancelled", "error")
# After these no frame of the context's stream follows, so the router forgets the stream
# (the server numbers streams per connection and reuses numbers after 65,535). An error
# is not among them: `context_exists` or `context_closed` refuse a message, and the
# context's audio goes on.
STREAM_ENDING = ("done", "cancelled")
# The client's own error codes (SpeechError.code), beside the server's.
CONNECTION_CLOSED = "connection_closed"  # closed with a code that is not resumable, or mid chat turn
RESUME_FAILED = "resume_failed"  # no gateway took the connection back


class SpeechError(Exception):
    """The server answered with an `error` message."""

    def __init__(self, code: str, message: str, retry_after_ms: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.retry_after_ms = retry_after_ms  # when trying again may succeed, if the server said


@dataclass(frozen=True)
class Event:
    """One received message or audio frame, with the context it belongs to."""

    at: float  # time.perf_counter() when it arrived
    context_id: str | None  # None: the connection's (ready, an error naming no context), or a frame of no known stream
    message: dict | None = None  # a JSON message's fields; None for a frame
    frame: v1.AudioFrame | None = None  # a binary audio frame; None for a message

    @property
    def kind(self) -> str | None:
        """The message's type; None for an audio frame."""
        return None if self.message is None else self.message["type"]

    @property
    def ends(self) -> bool:
        """Whether it ends its context (see ENDING)."""
        return self.kind in ENDING and self.context_id is not None


class Router:
    """The receiving side of one connection, sans I/O: which context each message and
    frame belongs to. `audio_start` maps a stream number to its context; frames carry
    only the number."""

    def __init__(self) -> None:
        self._streams: dict[int, str] = {}

    def route(self, message: str | bytes, at: float | None = None) -> Event:
        """The event for one received WebSocket message, arrived `at` (default: now).

        Raises ValueError for a message that is not protocol v1."""
        at = time.perf_counter() if at is None else at
        if isinstance(message, bytes):
            frame = _parse_frame(message)
            return Event(at, self._streams.get(frame.stream), frame=frame)
        m = _parse_message(message)
        context_id = m.get("context_id", m.get("turn_id"))  # chat mode's reply and reply_text name the turn
        if m["type"] == "audio_start":
            self._streams[m["stream"]] = context_id
        elif m["type"] in STREAM_ENDING:
            self._streams = {s: c for s, c in self._streams.items() if c != context_id}
        return Event(at, context_id, message=m)


def _parse_frame(data: bytes) -> v1.AudioFrame:
    try:
        return v1.parse_audio_frame(data)
    except struct.error:
        raise ValueError(f"a binary message of {len(data)} bytes is no audio frame") from None


def _parse_message(text: str) -> dict:
    m = json.loads(text)
    if not isinstance(m, dict) or not isinstance(m.get("type"), str):
        raise ValueError(f"not a protocol v1 message: {text[:80]!r}")
    return m


def raise_error(event: Event) -> None:
    """Raise the SpeechError an `error` event carries; nothing for any other event."""
    if event.kind == "error":
        raise SpeechError(event.message["code"], event.message["message"], event.message.get("retry_after_ms"))


def _expect(event: Event, kind: str) -> dict:
    raise_error(event)
    if event.kind != kind:
        raise SpeechError("unexpected", f"expected {kind}, got {event.kind or 'an audio frame'}")
    return event.message


def expect_ready(message: str | bytes) -> dict:
    """The `ready` that opens a connection, or answers its `config`; raises SpeechError
    for anything else."""
    return _expect(Router().route(message), "ready")


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The handshake's headers: the API key, for a gateway that requires one."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def frame_samples(frame: v1.AudioFrame, ready: dict) -> int:
    """The samples in the frame, given the connection's `ready`: a PCM or G.711 frame's
    are in its payload, an Opus packet holds frame_ms."""
    if (size := v1.BYTES_PER_SAMPLE.get(ready["format"])) is not None:
        return len(frame.payload) // (size * ready["channels"])
    return ready["sample_rate"] * ready["frame_ms"] // 1000


def audio_end_s(frame: v1.AudioFrame, ready: dict) -> float:
    """Where the frame's audio ends, in seconds from its context's first sample."""
    return (frame.sample_offset + frame_samples(frame, ready)) / ready["sample_rate"]


@dataclass(frozen=True)
class SpeechStarted:
    """Listen mode: an utterance began at `audio_ms` of the microphone's timeline; the
    server names it (`turn_id`)."""

    at: float  # time.perf_counter() when it arrived
    turn_id: str
    audio_ms: int


@dataclass(frozen=True)
class Transcript:
    """Listen mode: the utterance's words so far (a partial replaces the last), or its one final."""

    at: float
    turn_id: str
    text: str
    final: bool


@dataclass(frozen=True)
class SpeechStopped:
    """Listen mode: the utterance's speech ended at `audio_ms` of the microphone's timeline."""

    at: float
    turn_id: str
    audio_ms: int


# What a listening client hears: the recognizer's three messages, typed; a spoken chat turn's
# reply (chat mode: reply, reply_text, its frames, done, cancelled on context turn_id)
# and errors as the Events they are.
Heard = Union[SpeechStarted, Transcript, SpeechStopped, Event]


def heard(event: Event) -> Heard:
    """Listen mode's view of an event that names no context the client opened."""
    m = event.message
    if event.kind == "speech_started":
        return SpeechStarted(event.at, m["turn_id"], m["audio_ms"])
    if event.kind == "transcript":
        return Transcript(event.at, m["turn_id"], m["text"], m["final"])
    if event.kind == "speech_stopped":
        return SpeechStopped(event.at, m["turn_id"], m["audio_ms"])
    return event


class Microphone:
    """The microphone's timeline as sent: where each message's audio ended and when it
    went out. The server places speech in that timeline (speech_stopped's audio_ms: the
    end of speech), so `sent_at` turns that place into the time its last sample left,
    which is where voice-to-voice latency starts. Only about the last `keep_ms` are kept.
    `listen`: the config's, whose sample rate gives a PCM message's duration."""

    def __init__(self, keep_ms: float = 120_000, listen: dict | None = None) -> None:
        self.rate = listen_rate(listen)
        self.ms = 0.0  # the audio sent so far
        self.keep_ms = keep_ms
        self._ends: list[float] = []  # each message's end in the timeline, in order
        self._at: list[float] = []  # when each went out
        self._from_ms = 0.0  # where the first message kept starts

    def sent_audio(self, audio: bytes, at: float, duration_ms: float | None = None) -> None:
        """One message of the microphone's went out `at`: PCM s16le mono at the config's
        sample rate, or an Opus packet `duration_ms` long."""
        self.sent(pcm_ms(audio, self.rate) if duration_ms is None else duration_ms, at)

    def sent(self, duration_ms: float, at: float) -> None:
        self.ms += duration_ms
        self._ends.append(self.ms)
        self._at.append(at)
        if self._ends[0] < self.ms - 2 * self.keep_ms:  # trimmed now and then, not at every message
            first = bisect.bisect_left(self._ends, self.ms - self.keep_ms)
            self._from_ms = self._ends[first - 1]
            del self._ends[:first], self._at[:first]

    def sent_at(self, audio_ms: float) -> float | None:
        """When the message holding `audio_ms` of the timeline went out; None if it is
        not sent yet, or no longer kept."""
        i = bisect.bisect_left(self._ends, audio_ms)
        return None if audio_ms < self._from_ms or i == len(self._ends) else self._at[i]


def listen_rate(listen: dict | None) -> int:
    """The microphone's sample rate a config's `listen` says, or its format's default."""
    listen = listen or {}
    return listen.get("sample_rate", v1.LISTEN_DEFAULT_RATES[listen.get("format", "pcm_s16le")])


def pcm_ms(audio: bytes, rate: int) -> float:
    """The duration of a PCM s16le mono message."""
    return len(audio) / 2 * 1000 / rate
