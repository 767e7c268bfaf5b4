"""A protocol v1 connection that keeps everything it reads, for the tests."""

import asyncio
import json
import socket
import time
import urllib.parse
from typing import Any

import websockets

from speechstream import protocol as v1
from speechstream.client import Event, Router, connection


class Recorder:
    """A protocol v1 connection read one message at a time, every event kept with its
    arrival time: for tests and tools that look at the wire. It reads only when asked,
    so a caller can also leave the server's frames unread (backpressure)."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.events: list[Event] = []  # everything received, in order
        self._router = Router()

    async def send(self, **message: Any) -> float:
        """Send one JSON message; return when it went out (time.perf_counter() just before)."""
        sent = time.perf_counter()
        await self.ws.send(json.dumps(message))
        return sent

    async def read(self) -> Event:
        """Receive, route and keep one message or frame."""
        event = self._router.route(await self.ws.recv())
        self.events.append(event)
        return event

    async def until(self, kind: str, context_id: str | None = None, timeout: float = 60) -> dict:
        """Read until a message of `kind` (for `context_id`, when given) arrives; return it."""
        async with asyncio.timeout(timeout):
            while True:
                event = await self.read()
                if event.kind == kind and (context_id is None or event.context_id == context_id):
                    return event.message

    async def received(self, kind: str, context_id: str, timeout: float = 60) -> dict:
        """The context's first message of `kind`, read already or read now: for contexts
        that may end in any order."""
        for event in self.events:
            if event.kind == kind and event.context_id == context_id:
                return event.message
        return await self.until(kind, context_id, timeout)

    def messages(self, kind: str | None = None) -> list[dict]:
        """The messages received so far (of `kind`, when given)."""
        return [e.message for e in self.events if e.message is not None and (kind is None or e.kind == kind)]

    def frames(self, context_id: str | None) -> list[Event]:
        """The context's audio frames received so far, with their arrival times; None:
        frames of no known stream."""
        return [e for e in self.events if e.frame is not None and e.context_id == context_id]

    def audio(self, context_id: str | None) -> list[v1.AudioFrame]:
        """The context's audio frames received so far."""
        return [e.frame for e in self.frames(context_id)]


# A receive buffer this size holds about a second of the most bytes a stream sends
# (48 kHz PCM) per context: far less than a paragraph.
HOLDING_RCVBUF = 256 * 1024


async def holding_connection(url: str) -> websockets.ClientConnection:
    """A connection to the gateway at `url` whose receive buffer is fixed small, so that
    a context its reader stops reading holds its request on Triton: the gateway's sends
    block once the buffers between them are full. The kernel would otherwise grow the
    buffer up to net.ipv4.tcp_rmem's maximum (32 MiB on some hosts: minutes of audio),
    and the streams would end unread. Setting SO_RCVBUF before connecting turns that
    growth off for this socket."""
    parts = urllib.parse.urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, HOLDING_RCVBUF)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
        return await connection(url, sock=sock)
    except BaseException:
        sock.close()
        raise
