"""Python clients for protocol v1: `SpeechClient` (asyncio, several contexts on one
connection) and `SyncSpeechClient` (blocking, one utterance at a time).

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
from collections.abc import AsyncIterator, Iterator
from typing import Any

import websockets
import websockets.sync.client

from . import protocol as p

_END = object()


class SpeechError(Exception):
    """The server answered with an `error` message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _check(message: dict, expected: str) -> dict:
    if message["type"] == "error":
        raise SpeechError(message["code"], message["message"])
    if message["type"] != expected:
        raise SpeechError("unexpected", f"expected {expected}, got {message['type']}")
    return message


class Context:
    """One context on a `SpeechClient`: send text to it, iterate its audio frames."""

    def __init__(self, client: SpeechClient, context_id: str) -> None:
        self.client = client
        self.id = context_id
        self.events: asyncio.Queue = asyncio.Queue()  # AudioFrame, message dicts, then _END
        self.done: dict | None = None  # the `done` message, once it came

    async def _send(self, kind: str, **fields: Any) -> None:
        await self.client.ws.send(json.dumps({"type": kind, "context_id": self.id, **fields}))

    async def speak(self, text: str) -> None:
        """All of the text at once; the context ends after it."""
        await self._send("speak", text=text)

    async def text(self, delta: str) -> None:
        """Append text; sentences are spoken as soon as they are complete."""
        await self._send("text", text=delta)

    async def flush(self) -> None:
        await self._send("flush")

    async def close(self) -> None:
        """End of input: the audio ends after what was sent."""
        await self._send("close")

    async def cancel(self) -> None:
        await self._send("cancel")

    async def messages(self) -> AsyncIterator[p.AudioFrame | dict]:
        """Audio frames and messages (timestamps, flushed, ...) until done or cancelled.

        Raises SpeechError on an `error` for this context."""
        while (event := await self.events.get()) is not _END:
            if isinstance(event, dict) and event["type"] == "error":
                raise SpeechError(event["code"], event["message"])
            if isinstance(event, dict) and event["type"] == "done":
                self.done = event
            yield event
            if isinstance(event, dict) and event["type"] in ("done", "cancelled"):
                return

    async def frames(self) -> AsyncIterator[p.AudioFrame]:
        async for event in self.messages():
            if isinstance(event, p.AudioFrame):
                yield event


class SpeechClient:
    """One connection; a reader task routes each message and frame to its context."""

    def __init__(self, ws: websockets.ClientConnection, ready: dict) -> None:
        self.ws = ws
        self.ready = ready
        self.errors: list[dict] = []  # errors that name no context
        self._contexts: dict[str, Context] = {}
        self._streams: dict[int, Context] = {}
        self._ids = itertools.count(1)
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, url: str, api_key: str | None = None, **config: Any) -> SpeechClient:
        """Open a connection, send `config` when given (format, sample_rate, voice, ...), wait for `ready`."""
        ws = await websockets.connect(url, additional_headers=_headers(api_key), max_size=None)
        ready = _check(json.loads(await ws.recv()), "ready")
        if config:
            await ws.send(json.dumps({"type": "config", **config}))
            ready = _check(json.loads(await ws.recv()), "ready")
        return cls(ws, ready)

    async def __aenter__(self) -> SpeechClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def context(self, context_id: str | None = None) -> Context:
        context = Context(self, context_id or f"c{next(self._ids)}")
        self._contexts[context.id] = context
        return context

    async def speak(self, text: str) -> AsyncIterator[p.AudioFrame]:
        """Speak `text` in a new context; yield its audio frames until `done`."""
        context = self.context()
        await context.speak(text)
        async for frame in context.frames():
            yield frame

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                self._route(message)
        except websockets.ConnectionClosed:
            pass
        finally:
            for context in self._contexts.values():
                context.events.put_nowait(_END)

    def _route(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            frame = p.parse_audio_frame(message)
            if context := self._streams.get(frame.stream):
                context.events.put_nowait(frame)
            return
        m = json.loads(message)
        context = self._contexts.get(m.get("context_id"))
        if context is None:
            self.errors += [m] if m["type"] == "error" else []
            return
        if m["type"] == "audio_start":
            self._streams[m["stream"]] = context
        else:
            context.events.put_nowait(m)
        if m["type"] in ("done", "cancelled", "error"):
            del self._contexts[context.id]


class SyncSpeechClient:
    """A blocking client over `websockets.sync`: one utterance at a time."""

    def __init__(self, ws: websockets.sync.client.ClientConnection, ready: dict) -> None:
        self.ws = ws
        self.ready = ready
        self.done: dict | None = None  # the last utterance's `done` message
        self._ids = itertools.count(1)

    @classmethod
    def connect(cls, url: str, api_key: str | None = None, **config: Any) -> SyncSpeechClient:
        # legacy=True: a plain connection whose life this class manages (close, __exit__).
        ws = websockets.sync.client.connect(url, additional_headers=_headers(api_key), max_size=None, legacy=True)
        ready = _check(json.loads(ws.recv()), "ready")
        if config:
            ws.send(json.dumps({"type": "config", **config}))
            ready = _check(json.loads(ws.recv()), "ready")
        return cls(ws, ready)

    def __enter__(self) -> SyncSpeechClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def speak(self, text: str) -> Iterator[p.AudioFrame]:
        """Speak `text`; yield its audio frames until `done`. Read them all before the next call."""
        context_id = f"c{next(self._ids)}"
        self.ws.send(json.dumps({"type": "speak", "context_id": context_id, "text": text}))
        stream = None
        for message in self.ws:
            if isinstance(message, bytes):
                frame = p.parse_audio_frame(message)
                if frame.stream == stream:
                    yield frame
                continue
            m = json.loads(message)
            if m.get("context_id") != context_id:
                continue
            if m["type"] == "audio_start":
                stream = m["stream"]
            elif m["type"] == "error":
                raise SpeechError(m["code"], m["message"])
            elif m["type"] == "done":
                self.done = m
                return

    def close(self) -> None:
        self.ws.close()
