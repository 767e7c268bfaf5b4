"""A small asyncio client for protocol v1 (used by `speechstream-say`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import websockets

from . import protocol as p


class SpeechError(Exception):
    """The server answered with an `error` message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class SpeechClient:
    """One connection. `connect` applies an optional config and waits for `ready`."""

    def __init__(self, ws: websockets.ClientConnection, ready: dict) -> None:
        self.ws = ws
        self.ready = ready
        self._contexts = 0

    @classmethod
    async def connect(cls, url: str, **config: Any) -> SpeechClient:
        ws = await websockets.connect(url, max_size=None)
        ready = json.loads(await ws.recv())
        if config:
            await ws.send(json.dumps({"type": "config", **config}))
            ready = await cls._expect(ws, "ready")
        return cls(ws, ready)

    @staticmethod
    async def _expect(ws: websockets.ClientConnection, kind: str) -> dict:
        message = json.loads(await ws.recv())
        if message["type"] == "error":
            raise SpeechError(message["code"], message["message"])
        if message["type"] != kind:
            raise SpeechError("unexpected", f"expected {kind}, got {message['type']}")
        return message

    async def speak(self, text: str) -> AsyncIterator[p.AudioFrame]:
        """Speak `text` in a new context; yield its audio frames until `done`."""
        self._contexts += 1
        context_id = f"c{self._contexts}"
        await self.ws.send(json.dumps({"type": "speak", "context_id": context_id, "text": text}))
        stream = (await self._expect(self.ws, "audio_start"))["stream"]
        async for message in self.ws:
            if isinstance(message, bytes):
                frame = p.parse_audio_frame(message)
                if frame.stream == stream:
                    yield frame
                continue
            m = json.loads(message)
            if m.get("context_id") != context_id:
                continue
            if m["type"] == "error":
                raise SpeechError(m["code"], m["message"])
            if m["type"] == "done":
                return

    async def close(self) -> None:
        await self.ws.close()
