"""The asyncio client: `SpeechClient`, several contexts on one connection, a reader task
routing every event (speechstream.client.events) to its context; with `resume=True`, when a gateway
goes away its open contexts go on over a new connection (speechstream.client.resume). In listen mode
it sends the microphone's audio and hears the utterances the server's recognizer finds."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import websockets

from speechstream import protocol as v1
from speechstream.client.events import (
    CONNECTION_CLOSED,
    RESUME_FAILED,
    Event,
    Heard,
    Microphone,
    Router,
    SpeechError,
    auth_headers,
    expect_ready,
    heard,
    raise_error,
)
from speechstream.client.resume import RESUMABLE_CLOSES, Progress, Splice


def connection(url: str, api_key: str | None = None, **options: Any) -> websockets.connect:
    """A WebSocket connection to the gateway, to await or to use with `async with`.

    Raises websockets.InvalidStatus when the server refuses it (401, 403, 429)."""
    return websockets.connect(url, additional_headers=auth_headers(api_key), max_size=None, **options)


async def _open(url: str, api_key: str | None, config: dict) -> tuple[websockets.ClientConnection, dict]:
    """A connection that said `ready`, to `config` when given; closed again if refused."""
    ws = await connection(url, api_key)
    try:
        ready = expect_ready(await ws.recv())
        if config:
            await ws.send(json.dumps({"type": "config", **config}))
            ready = expect_ready(await ws.recv())
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
            raise_error(event)
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

    def __init__(self, ws: websockets.ClientConnection, ready: dict, reconnect: Reconnect | None = None,
                 listen: dict | None = None) -> None:
        self.ws = ws
        self.ready = ready
        self.reconnect = reconnect
        self.listen = listen  # the config's `listen`: the connection is a microphone
        self.microphone = Microphone(listen=listen)  # the audio sent, for voice-to-voice latency
        self._heard: asyncio.Queue[Heard | None] = asyncio.Queue()  # listen mode's events; None: the end
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
        sentence spoken again sounds the same.

        `listen` in the config ({} for its defaults; with `chat` too for a spoken
        conversation) makes the connection a microphone: `send_audio`, `end_of_speech`,
        and `heard()`. Listen mode does not resume: the recognizer's timeline and the
        conversation are the connection's."""
        if resume and "listen" in config:
            raise ValueError("listen mode does not resume: the microphone's timeline is the connection's")
        urls = [url] if isinstance(url, str) else list(url)
        asked = bool(config.get("timestamps"))
        if resume:
            config = {"seed": random.randrange(2**31), **config, "timestamps": True}

        async def open_(at: str) -> tuple[websockets.ClientConnection, dict]:
            return await _open(at, api_key, config)

        ws, ready = await open_(urls[0])
        return cls(ws, ready, Reconnect(urls, open_, timestamps=asked) if resume else None, config.get("listen"))

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

    async def send_audio(self, audio: bytes, duration_ms: float | None = None) -> float:
        """One microphone message (listen mode): PCM s16le mono at the config's
        `listen.sample_rate`, up to 200 ms, or one Opus packet (give its `duration_ms`).
        Send it as it is recorded: audio more than 2 s ahead of real time is dropped.
        Returns when it went out; `microphone` keeps that, for voice-to-voice latency."""
        await self._writable()
        sent = time.perf_counter()
        await self.ws.send(audio)
        self.microphone.sent_audio(audio, sent, duration_ms)
        return sent

    async def end_of_speech(self) -> float:
        """The utterance in progress ends now (push-to-talk), without waiting for the endpoint."""
        await self._writable()
        sent = time.perf_counter()
        await self.ws.send(json.dumps({"type": "end_of_speech"}))
        return sent

    async def heard(self) -> AsyncIterator[Heard]:
        """Listen mode's events, in order, until the connection ends: SpeechStarted,
        Transcript (partials, then one final) and SpeechStopped for each utterance; in chat
        mode, each spoken chat turn's reply as the Events of its context (named by the turn's
        id: reply, reply_text, audio frames, done, or cancelled at barge-in); errors that
        name no context of this client's (audio_not_accepted, recognition_failed) as
        Events too, since listening goes on after them."""
        while (event := await self._heard.get()) is not None:
            yield event

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
            self._heard.put_nowait(None)

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
            if self.listen is not None and event.kind != "audio_start":
                self._heard.put_nowait(heard(event))  # a spoken chat turn's, or the connection's
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
