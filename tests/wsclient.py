"""A protocol v1 test client over a real WebSocket that records what arrives, and when."""

import asyncio
import json
import time

import websockets

from gateway import protocol as p


class Client:
    """A protocol v1 client that records every message with its arrival time."""

    def __init__(self, ws):
        self.ws = ws
        self.frames: dict[int, list[tuple[float, p.AudioFrame]]] = {}
        self.messages: list[tuple[float, dict]] = []
        self.streams: dict[str, int] = {}

    async def send(self, **message):
        await self.ws.send(json.dumps(message))
        return time.perf_counter()

    async def read(self):
        """Read one message or frame into the records; return the message, if any."""
        m = await self.ws.recv()
        now = time.perf_counter()
        if isinstance(m, bytes):
            f = p.parse_audio_frame(m)
            self.frames.setdefault(f.stream, []).append((now, f))
            return None
        m = json.loads(m)
        self.messages.append((now, m))
        if m["type"] == "audio_start":
            self.streams[m["context_id"]] = m["stream"]
        return m

    async def until(self, kind, context_id=None, timeout=60):
        """Read until a message of `kind` (for `context_id`) arrives; return it."""
        async with asyncio.timeout(timeout):
            while True:
                m = await self.read()
                if m and m["type"] == kind and (context_id is None or m.get("context_id") == context_id):
                    return m

    def audio(self, context_id):
        return [f for _, f in self.frames.get(self.streams[context_id], [])]


def connect(url):
    return websockets.connect(url, max_size=None)
