"""The Python client of protocol v1: the one place that knows how received messages
map to contexts, and two ways to drive it.

- `Router` (sans I/O): each received message or audio frame → an `Event` naming its
  context, stamped with its arrival time (`time.perf_counter()`).
- `SpeechClient` (asyncio): several contexts on one connection, a reader task routing
  every event to its context.
- `SyncSpeechClient` (blocking): one utterance at a time, over websockets.sync or any
  socket with send/recv/close (the Locust users' websocket-client).

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
import struct
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
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


def audio_end_s(frame: v1.AudioFrame, ready: dict) -> float:
    """Where the frame's audio ends, in seconds from its context's first sample, given the
    connection's `ready`: a PCM frame's length is in its payload, an Opus packet holds frame_ms."""
    rate = ready["sample_rate"]
    if (size := v1.BYTES_PER_SAMPLE.get(ready["format"])) is not None:
        samples = len(frame.payload) // (size * ready["channels"])
    else:
        samples = rate * ready["frame_ms"] // 1000
    return (frame.sample_offset + samples) / rate


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def connection(url: str, api_key: str | None = None, **options: Any) -> websockets.connect:
    """A WebSocket connection to the gateway, to await or to use with `async with`.

    Raises websockets.InvalidStatus when the server refuses it (401, 403, 429)."""
    return websockets.connect(url, additional_headers=_headers(api_key), max_size=None, **options)


class Context:
    """One context on a `SpeechClient`: send text to it, iterate its audio frames.

    Each send returns when it went out (time.perf_counter() just before sending), the
    start of a time to first audio."""

    def __init__(self, client: SpeechClient, context_id: str) -> None:
        self.client = client
        self.id = context_id
        self.done: dict | None = None  # the `done` message, once it came
        self._events: asyncio.Queue[Event | None] = asyncio.Queue()  # None: the connection ended

    async def _send(self, kind: str, **fields: Any) -> float:
        sent = time.perf_counter()
        await self.client.ws.send(json.dumps({"type": kind, "context_id": self.id, **fields}))
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
        stays None). Raises SpeechError on an `error` naming this context."""
        while (event := await self._events.get()) is not None:
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


class Turn(Context):
    """A chat turn on a `SpeechClient` (chat mode, on a server with a chat model): send
    the user's transcript as it is heard, then iterate the reply's events: `reply` (how
    the speculation went), `reply_text` deltas, audio frames, `done`. `cancel` stops the
    reply (barge-in)."""

    async def user(self, text: str, final: bool = False) -> float:
        """The whole transcript so far (it replaces the last); `final` ends the turn."""
        sent = time.perf_counter()
        await self.client.ws.send(json.dumps({"type": "user", "turn_id": self.id, "text": text, "final": final}))
        return sent


class SpeechClient:
    """One connection; a reader task routes each message and frame to its context."""

    def __init__(self, ws: websockets.ClientConnection, ready: dict) -> None:
        self.ws = ws
        self.ready = ready
        self.errors: list[dict] = []  # errors that name no context of this client's
        self._router = Router()
        self._contexts: dict[str, Context] = {}
        self._ids = itertools.count(1)
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, url: str, api_key: str | None = None, **config: Any) -> SpeechClient:
        """Open a connection, send `config` when given (format, sample_rate, voice, ...),
        wait for `ready`. Raises SpeechError if the server refuses the config,
        websockets.InvalidStatus if it refuses the connection."""
        ws = await connection(url, api_key)
        try:
            ready = _ready(await ws.recv())
            if config:
                await ws.send(json.dumps({"type": "config", **config}))
                ready = _ready(await ws.recv())
        except BaseException:
            await ws.close()
            raise
        return cls(ws, ready)

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
        await self.ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                self._deliver(self._router.route(message))
        except websockets.ConnectionClosed:
            pass
        finally:
            for context in self._contexts.values():
                context._events.put_nowait(None)

    def _deliver(self, event: Event) -> None:
        context = self._contexts.get(event.context_id)
        if context is None:
            if event.kind == "error":
                self.errors.append(event.message)
            return
        if event.kind != "audio_start":  # routing's business, not the caller's
            context._events.put_nowait(event)
        if event.ends:
            del self._contexts[context.id]


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
