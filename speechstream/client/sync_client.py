"""The blocking client: `SyncSpeechClient`, one utterance at a time, over
websockets.sync or any socket with send/recv/close (the Locust users' websocket-client);
in listen mode, a microphone. It routes with the same sans-I/O core as the asyncio
client (speechstream.client.events)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any, Protocol

import websockets.sync.client

from speechstream import protocol as v1
from speechstream.client.events import (
    Event,
    Heard,
    Microphone,
    Router,
    auth_headers,
    expect_ready,
    heard,
    raise_error,
)


class SyncSocket(Protocol):
    """What `SyncSpeechClient` needs of a blocking WebSocket."""

    def send(self, message: str | bytes) -> Any: ...

    def recv(self) -> str | bytes: ...

    def close(self) -> Any: ...


class SyncSpeechClient:
    """A blocking client: one utterance at a time."""

    def __init__(self, ws: SyncSocket, ready: dict, listen: dict | None = None) -> None:
        self.ws = ws
        self.ready = ready
        self.listen = listen  # the config's `listen`: the connection is a microphone
        self.microphone = Microphone(listen=listen)  # the audio sent, for voice-to-voice latency
        self.sent: float | None = None  # when the last utterance's `speak` went out (time.perf_counter())
        self.done: dict | None = None  # the last utterance's `done` message
        self._router = Router()
        self._ids = itertools.count(1)

    @classmethod
    def connect(cls, url: str, api_key: str | None = None, **config: Any) -> SyncSpeechClient:
        """`SpeechClient.connect`, blocking, over websockets.sync."""
        # legacy=True: a plain connection whose life this class manages (close, __exit__).
        ws = websockets.sync.client.connect(url, additional_headers=auth_headers(api_key), max_size=None, legacy=True)
        return cls.over(ws, **config)

    @classmethod
    def over(cls, ws: SyncSocket, **config: Any) -> SyncSpeechClient:
        """A client on an open socket: wait for `ready`, send `config` when given.
        Closes the socket and raises SpeechError if the server refuses the config."""
        try:
            ready = expect_ready(ws.recv())
            if config:
                ws.send(json.dumps({"type": "config", **config}))
                ready = expect_ready(ws.recv())
        except BaseException:
            ws.close()
            raise
        return cls(ws, ready, config.get("listen"))

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
            raise_error(event)
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

    def send_audio(self, audio: bytes, duration_ms: float | None = None) -> float:
        """One microphone message (listen mode; see SpeechClient.send_audio). It may be
        sent from another thread than the one reading `heard()`: websockets' blocking
        connection sends and receives at once."""
        sent = time.perf_counter()
        self.ws.send(audio)
        self.microphone.sent_audio(audio, sent, duration_ms)
        return sent

    def end_of_speech(self) -> float:
        sent = time.perf_counter()
        self.ws.send(json.dumps({"type": "end_of_speech"}))
        return sent

    def heard(self) -> Iterator[Heard]:
        """Listen mode's events as they come (see SpeechClient.heard), for as long as the
        caller reads; the socket's own exception when the connection ends."""
        while True:
            event = self._router.route(self.ws.recv())
            if event.kind != "audio_start":  # routing's business
                yield heard(event)

    def close(self) -> None:
        self.ws.close()
