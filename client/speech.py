"""The Python client of protocol v1: the one place that knows how received messages
map to contexts, and two ways to drive it.

- `Router` (sans I/O): each received message or audio frame → an `Event` naming its
  context, stamped with its arrival time (`time.perf_counter()`).
- `SpeechClient` (asyncio): several contexts on one connection, a reader task routing
  every event to its context.
- `SyncSpeechClient` (blocking): one utterance at a time, over websockets.sync or any
  socket with send/recv/close (the Locust users' websocket-client).
- `Progress` and `Splice` (sans I/O): what a context sent and what its listener got, and
  how it goes on where a gateway went away (closed with 1001 or 1012): the text from the
  last sentence begun, spoken again on another gateway, the audio heard already skipped.
  `SpeechClient.connect(..., resume=True)` does it.

    async with await SpeechClient.connect("ws://127.0.0.1:8080/v1/stream") as client:
        async for frame in client.speak("Hello there."):
            ...  # frame.payload is one Opus packet

    with SyncSpeechClient.connect("ws://127.0.0.1:8080/v1/stream", format="pcm_s16le") as client:
        pcm = b"".join(frame.payload for frame in client.speak("Hello there."))
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import websockets
import websockets.sync.client
from contract import protocol as v1


# A context ends, for a client, with its `done`, its `cancelled`, or an `error` naming it.
ENDING = ("done", "cancelled", "error")
# After these no frame of the context's stream follows, so the router forgets the stream
# (the server numbers streams per connection and reuses numbers after 65,535). An error
# is not among them: `context_exists` or `context_closed` refuse a message, and the
# context's audio goes on.
STREAM_ENDING = ("done", "cancelled")
# Close codes after which the same speech goes on over a new connection: going away (a
# gateway that drained), service restart. Any other close ends the contexts with an error.
RESUMABLE_CLOSES = (1001, 1012)
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


def _raise_error(event: Event) -> None:
    if event.kind == "error":
        raise SpeechError(event.message["code"], event.message["message"], event.message.get("retry_after_ms"))


def _expect(event: Event, kind: str) -> dict:
    _raise_error(event)
    if event.kind != kind:
        raise SpeechError("unexpected", f"expected {kind}, got {event.kind or 'an audio frame'}")
    return event.message


def _ready(message: str | bytes) -> dict:
    """The `ready` that opens a connection, or answers its `config`."""
    return _expect(Router().route(message), "ready")


def frame_samples(frame: v1.AudioFrame, ready: dict) -> int:
    """The samples in the frame, given the connection's `ready`: a PCM or G.711 frame's
    are in its payload, an Opus packet holds frame_ms."""
    if (size := v1.BYTES_PER_SAMPLE.get(ready["format"])) is not None:
        return len(frame.payload) // (size * ready["channels"])
    return ready["sample_rate"] * ready["frame_ms"] // 1000


def audio_end_s(frame: v1.AudioFrame, ready: dict) -> float:
    """Where the frame's audio ends, in seconds from its context's first sample."""
    return (frame.sample_offset + frame_samples(frame, ready)) / ready["sample_rate"]


# Resuming a context on another connection, sans I/O.
#
# The server cuts a context's text into sentences and synthesizes each whole, and with
# a seed a sentence's noise depends on its text alone: spoken again, on any gateway in
# front of the same voice, a sentence sounds the same. So a context resumes at the start
# of a sentence (its anchor) whose end the listener may not have heard, every sentence
# before it heard whole: its text from there goes to the new connection, and the resumed
# audio is put on the listener's timeline by that sentence's first word, heard at
# `start_ms[0]` in both contexts' `timestamps`. What the listener heard already is
# skipped: to the sample in PCM and G.711, to the nearest packet in Opus.


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


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def connection(url: str, api_key: str | None = None, **options: Any) -> websockets.connect:
    """A WebSocket connection to the gateway, to await or to use with `async with`.

    Raises websockets.InvalidStatus when the server refuses it (401, 403, 429)."""
    return websockets.connect(url, additional_headers=_headers(api_key), max_size=None, **options)


async def _open(url: str, api_key: str | None, config: dict) -> tuple[websockets.ClientConnection, dict]:
    """A connection that said `ready`, to `config` when given; closed again if refused."""
    ws = await connection(url, api_key)
    try:
        ready = _ready(await ws.recv())
        if config:
            await ws.send(json.dumps({"type": "config", **config}))
            ready = _ready(await ws.recv())
    except BaseException:
        await ws.close()
        raise
    return ws, ready


class Context:
    """One context on a `SpeechClient`: send text to it, iterate its audio frames.

    Each send returns when it went out (time.perf_counter() just before sending), the
    start of a time to first audio. On a client that resumes, a send made while the
    client reconnects goes out on the new connection."""

    def __init__(self, client: SpeechClient, context_id: str) -> None:
        self.client = client
        self.id = context_id
        self.done: dict | None = None  # the `done` message, once it came
        self.progress = Progress(client.ready)
        # None: the connection ended; a SpeechError: it ended, and the context with this error.
        self._events: asyncio.Queue[Event | SpeechError | None] = asyncio.Queue()
        self._splice: Splice | None = None  # since it resumed: its events on the listener's timeline

    async def _send(self, kind: str, **fields: Any) -> float:
        await self.client._writable()
        self.progress.sent(kind, **fields)  # at once: a resume from now on carries it
        sent = time.perf_counter()
        try:
            await self.client.ws.send(json.dumps({"type": kind, "context_id": self.id, **fields}))
        except websockets.ConnectionClosed:
            if self.client.reconnect is None:
                raise
            # Gone out or not, the resume says it again.
        return sent

    async def speak(self, text: str, **voice: Any) -> float:
        """All of the text at once; the context ends after it. `voice`: on the message
        that opens the context, its own voice and voice parameters (voice="nova",
        length_scale=0.9, ...) over the connection's config."""
        return await self._send("speak", text=text, **voice)

    async def text(self, delta: str, **voice: Any) -> float:
        """Append text; sentences are spoken as soon as they are complete. `voice` as
        for `speak`."""
        return await self._send("text", text=delta, **voice)

    async def flush(self) -> float:
        return await self._send("flush")

    async def close(self) -> float:
        """End of input: the audio ends after what was sent."""
        return await self._send("close")

    async def cancel(self) -> float:
        return await self._send("cancel")

    async def events(self) -> AsyncIterator[Event]:
        """Its frames and messages (timestamps, flushed, ...) with their arrival times,
        through `done` or `cancelled`; fewer if the connection ends first (then `done`
        stays None). Raises SpeechError on an `error` naming this context, and, on a
        client that resumes, when the connection ends and the context cannot go on."""
        while (event := await self._events.get()) is not None:
            if isinstance(event, SpeechError):
                raise event
            _raise_error(event)
            if event.kind == "done":
                self.done = event.message
            yield event
            if event.ends:
                return

    async def messages(self) -> AsyncIterator[v1.AudioFrame | dict]:
        """`events()` without the arrival times: audio frames and message dicts."""
        async for event in self.events():
            yield event.frame or event.message

    async def frames(self) -> AsyncIterator[v1.AudioFrame]:
        async for event in self.events():
            if event.frame:
                yield event.frame

    def _receive(self, event: Event) -> Event | None:
        """The event as this context's listener gets it, recorded; None where they have
        had it already."""
        if self._splice is not None and (event := self._splice.event(event)) is None:
            return None
        self.progress.received(event)
        return event

    async def _resume(self) -> None:
        """Say again, on the client's new connection, what the listener has not heard
        whole; or end with why it cannot be."""
        if self.progress.cancelled:  # its `cancelled` was all that was left
            self.client._end(self, Event(time.perf_counter(), self.id, {"type": "cancelled", "context_id": self.id}))
        elif self.progress.voice in self.client.ready.get("without_word_timestamps", ()):
            self.client._end(self, SpeechError(CONNECTION_CLOSED, (
                f"the connection went away and voice '{self.progress.voice}' gives no word timestamps to resume from")))
        else:
            self._splice = self.progress.splice()
            for message in self.progress.resume():
                await self.client.ws.send(json.dumps(message | {"context_id": self.id}))


class Turn(Context):
    """A chat turn on a `SpeechClient` (chat mode, on a server with a chat model): send
    the user's transcript as it is heard, then iterate the reply's events: `reply` (how
    the speculation went), `reply_text` deltas, audio frames, `done`. `cancel` stops the
    reply (barge-in). A turn does not resume: the conversation was the old connection's."""

    async def user(self, text: str, final: bool = False) -> float:
        """The whole transcript so far (it replaces the last); `final` ends the turn."""
        await self.client._writable()
        sent = time.perf_counter()
        await self.client.ws.send(json.dumps({"type": "user", "turn_id": self.id, "text": text, "final": final}))
        return sent

    async def _resume(self) -> None:
        self.client._end(self, SpeechError(CONNECTION_CLOSED, "the connection went away mid turn; its conversation with it"))


Opener = Callable[[str], Awaitable[tuple[Any, dict]]]  # a URL → an open socket and its `ready`


@dataclass
class Reconnect:
    """Where and how a client opens a new connection when its gateway goes away: each
    try waits longer (`backoff_s`, doubling up to `max_backoff_s`; the first goes at
    once) and takes the next of `urls` (several gateways, or one URL in front of several,
    such as a Kubernetes Service)."""

    urls: Sequence[str]
    open: Opener  # sends the client's config and waits for `ready`
    timestamps: bool = False  # whether the caller asked for `timestamps`; if not, they are kept from it
    tries: int = 5
    backoff_s: float = 0.2
    max_backoff_s: float = 2.0
    used: int = 0  # the index in `urls` of the connection open now

    async def connect(self) -> tuple[Any, dict]:
        """A new connection and its `ready`. Raises SpeechError(RESUME_FAILED) after `tries`."""
        failure: Exception | None = None
        for attempt in range(self.tries):
            if attempt:
                await asyncio.sleep(min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s))
            self.used = (self.used + 1) % len(self.urls)
            try:
                return await self.open(self.urls[self.used])
            except (OSError, TimeoutError, websockets.WebSocketException, SpeechError) as e:
                failure = e
        raise SpeechError(RESUME_FAILED, f"no gateway took the connection back in {self.tries} tries: {failure}")


class SpeechClient:
    """One connection; a reader task routes each message and frame to its context. With
    a `reconnect`, when the gateway goes away (closes with 1001 or 1012) the client
    connects again and its open contexts go on there (see `Progress`)."""

    def __init__(self, ws: websockets.ClientConnection, ready: dict, reconnect: Reconnect | None = None) -> None:
        self.ws = ws
        self.ready = ready
        self.reconnect = reconnect
        self.resumes = 0  # new connections its contexts went on over
        self.errors: list[dict] = []  # errors that name no context of this client's
        self._router = Router()
        self._contexts: dict[str, Context] = {}
        self._ids = itertools.count(1)
        self._closing = False  # close() called: the connection's end is no loss
        self._failure: SpeechError | None = None  # why the client cannot send any more
        self._online = asyncio.Event()  # clear while it reconnects
        self._online.set()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, url: str | Sequence[str], api_key: str | None = None, resume: bool = False,
                      **config: Any) -> SpeechClient:
        """Open a connection, send `config` when given (format, sample_rate, voice, ...),
        wait for `ready`. Raises SpeechError if the server refuses the config,
        websockets.InvalidStatus if it refuses the connection.

        `url`: a gateway, or several: the first is connected to. `resume`: when the
        gateway goes away, connect again (to the next of them) and go on with the open
        contexts there; the config then asks for `timestamps` (kept from the contexts'
        events unless asked for) and carries a seed (random unless given), so that a
        sentence spoken again sounds the same."""
        urls = [url] if isinstance(url, str) else list(url)
        asked = bool(config.get("timestamps"))
        if resume:
            config = {"seed": random.randrange(2**31), **config, "timestamps": True}

        async def open_(at: str) -> tuple[websockets.ClientConnection, dict]:
            return await _open(at, api_key, config)

        ws, ready = await open_(urls[0])
        return cls(ws, ready, Reconnect(urls, open_, timestamps=asked) if resume else None)

    async def __aenter__(self) -> SpeechClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def context(self, context_id: str | None = None) -> Context:
        context = Context(self, context_id or f"c{next(self._ids)}")
        self._contexts[context.id] = context
        return context

    def turn(self, turn_id: str | None = None) -> Turn:
        """A new chat turn (connect with config chat={...} to set its speculation)."""
        turn = Turn(self, turn_id or f"t{next(self._ids)}")
        self._contexts[turn.id] = turn
        return turn

    async def speak(self, text: str, **voice: Any) -> AsyncIterator[v1.AudioFrame]:
        """Speak `text` in a new context (with its own `voice` and voice parameters, as
        Context.speak); yield its audio frames until `done`."""
        context = self.context()
        await context.speak(text, **voice)
        async for frame in context.frames():
            yield frame

    async def close(self) -> None:
        self._closing = True
        await self.ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def _writable(self) -> None:
        """Return once a message may go out: at once, or when a reconnection is over.
        Raises the SpeechError that ended the client."""
        while not self._online.is_set():
            await self._online.wait()
        if self._failure is not None:
            raise self._failure

    async def _read(self) -> None:
        try:
            while True:
                try:
                    async for message in self.ws:
                        self._deliver(self._router.route(message))
                except websockets.ConnectionClosed:
                    pass
                if self._closing or self.reconnect is None:
                    return
                if self.ws.close_code not in RESUMABLE_CLOSES:
                    raise SpeechError(CONNECTION_CLOSED, f"the connection closed with code {self.ws.close_code}")
                await self._resume()
        except SpeechError as e:
            self._failure = e
        finally:
            self._online.set()  # a sender waiting learns of the failure
            for context in list(self._contexts.values()):
                self._end(context, self._failure)

    async def _resume(self) -> None:
        """Connect again and go on with the open contexts there."""
        self._online.clear()
        self.ws, self.ready = await self.reconnect.connect()
        self._router = Router()
        self.resumes += 1
        try:
            for context in list(self._contexts.values()):
                await context._resume()
        except websockets.ConnectionClosed:
            pass  # gone again: the reader sees it, and resumes them once more
        self._online.set()

    def _deliver(self, event: Event) -> None:
        context = self._contexts.get(event.context_id)
        if context is None:
            if event.kind == "error":
                self.errors.append(event.message)
            return
        if (event := context._receive(event)) is None:
            return
        unasked = event.kind == "timestamps" and self.reconnect is not None and not self.reconnect.timestamps
        if event.kind == "audio_start" or unasked:
            return  # routing's business, or what the caller did not ask for
        context._events.put_nowait(event)
        if event.ends:
            del self._contexts[context.id]

    def _end(self, context: Context, last: Event | SpeechError | None) -> None:
        """End the context, with its last event, the error that ends it, or quietly."""
        context._events.put_nowait(last)
        self._contexts.pop(context.id, None)


class SyncSocket(Protocol):
    """What `SyncSpeechClient` needs of a blocking WebSocket."""

    def send(self, message: str) -> Any: ...

    def recv(self) -> str | bytes: ...

    def close(self) -> Any: ...


class SyncSpeechClient:
    """A blocking client: one utterance at a time."""

    def __init__(self, ws: SyncSocket, ready: dict) -> None:
        self.ws = ws
        self.ready = ready
        self.sent: float | None = None  # when the last utterance's `speak` went out (time.perf_counter())
        self.done: dict | None = None  # the last utterance's `done` message
        self._router = Router()
        self._ids = itertools.count(1)

    @classmethod
    def connect(cls, url: str, api_key: str | None = None, **config: Any) -> SyncSpeechClient:
        """`SpeechClient.connect`, blocking, over websockets.sync."""
        # legacy=True: a plain connection whose life this class manages (close, __exit__).
        ws = websockets.sync.client.connect(url, additional_headers=_headers(api_key), max_size=None, legacy=True)
        return cls.over(ws, **config)

    @classmethod
    def over(cls, ws: SyncSocket, **config: Any) -> SyncSpeechClient:
        """A client on an open socket: wait for `ready`, send `config` when given.
        Closes the socket and raises SpeechError if the server refuses the config."""
        try:
            ready = _ready(ws.recv())
            if config:
                ws.send(json.dumps({"type": "config", **config}))
                ready = _ready(ws.recv())
        except BaseException:
            ws.close()
            raise
        return cls(ws, ready)

    def __enter__(self) -> SyncSpeechClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def events(self, text: str) -> Iterator[Event]:
        """Speak `text` in a new context; yield its frames and messages with their arrival
        times, through `done`. Raises SpeechError on its `error`, and the socket's own
        exception if the connection ends first. Read them all before the next call."""
        context_id = f"c{next(self._ids)}"
        self.done = None
        self.sent = time.perf_counter()
        self.ws.send(json.dumps({"type": "speak", "context_id": context_id, "text": text}))
        while True:
            event = self._router.route(self.ws.recv())
            if event.context_id != context_id or event.kind == "audio_start":
                continue  # a context given up before this one, or routing's business
            _raise_error(event)
            if event.kind == "done":
                self.done = event.message
            yield event
            if event.ends:
                return

    def speak(self, text: str) -> Iterator[v1.AudioFrame]:
        """Speak `text`; yield its audio frames until `done` (see `events`)."""
        for event in self.events(text):
            if event.frame:
                yield event.frame

    def close(self) -> None:
        self.ws.close()
