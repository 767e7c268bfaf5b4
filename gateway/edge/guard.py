"""The gateway's listening socket, and what it polices before aiohttp reads a byte.

- Connections: at most `max_connections` open in all and `max_connections_per_client`
  per client address. Past either cap a new connection gets a plain HTTP 503 / 429 and
  is closed at once, so a flood of connections neither exhausts the process's file
  descriptors nor reaches the application.
- WebSocket frames from the client, on a connection whose first request asks for the
  upgrade: an unmasked frame closes the connection with 1002 (RFC 6455 section 5.1 says
  a server must), and pings beyond `PING_RATE` close it with 1008, before aiohttp
  answers them.

Slow request headers and idle keep-alive are bounded by aiohttp's keepalive timeout
(server.py). `FrameWalker`, `TokenBucket` and `ConnectionCounts` are sans I/O;
`GuardedConnection` is the asyncio shell that wraps each aiohttp connection.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from gateway.edge.access import Refusal, log_refusal
from gateway.settings import Settings

MAX_HEAD_BYTES = 16 * 1024  # aiohttp refuses longer request heads itself
UPGRADE = re.compile(rb"(?im)^upgrade:[ \t]*websocket[ \t]*\r?$")
PING = 0x9
PING_RATE = (2.0, 20)  # pings per second, and the burst allowed above that rate
PROTOCOL_ERROR, POLICY_VIOLATION = 1002, 1008
CLOSE_GRACE_S = 5.0  # how long a refused client may take to close its end after our last word


@dataclass(frozen=True)
class Frame:
    opcode: int
    masked: bool


class FrameWalker:
    """Finds the frame headers in a client's WebSocket byte stream without copying
    payloads: `feed` returns each frame whose header it completes."""

    def __init__(self) -> None:
        self._head = bytearray()
        self._skip = 0  # payload bytes of the current frame still to pass over

    def feed(self, data: bytes) -> list[Frame]:
        frames, i = [], 0
        while i < len(data):
            if self._skip:
                step = min(self._skip, len(data) - i)
                self._skip -= step
                i += step
                continue
            take = min((_header_size(self._head) or 2) - len(self._head), len(data) - i)
            self._head += data[i:i + take]
            i += take
            if len(self._head) == _header_size(self._head):
                frames.append(Frame(opcode=self._head[0] & 0x0F, masked=bool(self._head[1] & 0x80)))
                self._skip = _payload_size(self._head)
                self._head.clear()
        return frames


def _header_size(head: bytes) -> int | None:
    """A frame header's whole size, once its first two bytes are known."""
    if len(head) < 2:
        return None
    return 2 + {126: 2, 127: 8}.get(head[1] & 0x7F, 0) + (4 if head[1] & 0x80 else 0)


def _payload_size(head: bytes) -> int:
    length = head[1] & 0x7F
    return int.from_bytes(head[2:2 + {126: 2, 127: 8}[length]], "big") if length in (126, 127) else length


class TokenBucket:
    """`rate` events per second on average, `burst` at once. Sans I/O; `clock` is injected."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._tokens, self._at = float(burst), clock()

    def take(self) -> bool:
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class ConnectionCounts:
    """Open connections, in all and per client address, against their caps (0: none)."""

    def __init__(self, cap: int, per_client_cap: int) -> None:
        self.cap, self.per_client_cap = cap, per_client_cap
        self.open: Counter[str] = Counter()

    def admit(self, client: str) -> Refusal | None:
        """Count a new connection from `client`, or say why it is refused."""
        if self.cap and self.open.total() >= self.cap:
            log_refusal(f"a connection from {client}: the gateway has {self.cap} open")
            return Refusal(HTTPStatus.SERVICE_UNAVAILABLE, "the gateway is at its connection cap", {"Retry-After": "1"})
        if self.per_client_cap and self.open[client] >= self.per_client_cap:
            log_refusal(f"a connection from {client}: {self.per_client_cap} already open")
            return Refusal(HTTPStatus.TOO_MANY_REQUESTS, f"at most {self.per_client_cap} connections per client",
                           {"Retry-After": "1"})
        self.open[client] += 1
        return None

    def closed(self, client: str) -> None:
        self.open[client] -= 1
        if not self.open[client]:
            del self.open[client]


class DetachableTransport:
    """The transport as aiohttp sees it. Once detached, it is closing to aiohttp and what
    aiohttp writes or closes goes nowhere: the guard has the last word on the wire."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.detached = False

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.detached or self._transport.is_closing()

    def write(self, data) -> None:
        if not self.detached:
            self._transport.write(data)

    def writelines(self, lines) -> None:
        if not self.detached:
            self._transport.writelines(lines)

    def close(self) -> None:
        if not self.detached:
            self._transport.close()


class GuardedConnection(asyncio.Protocol):
    """One accepted connection: refused at a cap, else handed to aiohttp's protocol, with
    the client's bytes looked at on the way in."""

    def __init__(self, counts: ConnectionCounts, handler: Callable[[], asyncio.Protocol]) -> None:
        self.counts, self.handler = counts, handler
        self.inner: asyncio.Protocol | None = None  # None once refused or ended by the guard
        self.admitted = False
        self.head: bytearray | None = bytearray()  # the first request's head until it ends
        self.frames: FrameWalker | None = None  # once the first request asked for a WebSocket
        self.pings = TokenBucket(*PING_RATE)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.client = (transport.get_extra_info("peername") or ("",))[0]
        if refusal := self.counts.admit(self.client):
            self._last_word(refusal.as_http())
            return
        self.admitted = True
        self.inner = self.handler()
        self.seen_by_inner = DetachableTransport(transport)
        self.inner.connection_made(self.seen_by_inner)

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return  # refused: what the client still sends is dropped
        if self.head is not None:
            frames = self._read_head(data)
        else:
            frames = self.frames.feed(data) if self.frames else []
        if not self._refuse_frames(frames):
            self.inner.data_received(data)

    def _read_head(self, data: bytes) -> list[Frame]:
        """Look for the end of the first request's head; past it, the frames that follow
        an upgrade request."""
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > MAX_HEAD_BYTES:
                self.head = None
            return []
        head, self.head = self.head, None
        if not UPGRADE.search(head, 0, end + 2):
            return []
        self.frames = FrameWalker()
        return self.frames.feed(bytes(head[end + 4:]))

    def _refuse_frames(self, frames: list[Frame]) -> bool:
        """Close the connection for a frame it may not send; True if closed."""
        for frame in frames:
            if not frame.masked:
                return self._close(PROTOCOL_ERROR, "client frames must be masked")
            if frame.opcode == PING and not self.pings.take():
                return self._close(POLICY_VIOLATION, "too many pings")
        return False

    def _close(self, code: int, reason: str) -> bool:
        log_refusal(f"a WebSocket frame from {self.client}: {reason}")
        inner, self.inner = self.inner, None
        self.seen_by_inner.detached = True
        inner.connection_lost(None)  # aiohttp ends the connection's handler
        payload = code.to_bytes(2, "big") + reason.encode()
        self._last_word(bytes([0x88, len(payload)]) + payload)  # an unmasked close frame
        return True

    def _last_word(self, data: bytes) -> None:
        """Send `data`, then end our half of the connection. Closing at once could reset
        the connection before the client reads `data` (its own bytes are still unread);
        the client closes its half, or is cut off after CLOSE_GRACE_S."""
        self.transport.write(data)
        self.transport.write_eof()
        asyncio.get_running_loop().call_later(CLOSE_GRACE_S, self.transport.abort)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner else False  # False: the transport closes

    def pause_writing(self) -> None:
        if self.inner:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.counts.closed(self.client)
        if self.inner:
            self.inner.connection_lost(exc)


async def open_server(handler: Callable[[], asyncio.Protocol], settings: Settings, reuse_port: bool = False) -> asyncio.Server:
    """The server socket on the settings' address, each connection guarded, then given to `handler`
    (aiohttp's `AppRunner.server`); with `reuse_port`, beside other processes on it."""
    counts = ConnectionCounts(settings.max_connections, settings.max_connections_per_client)
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: GuardedConnection(counts, handler), settings.host, settings.port,
                                    reuse_port=reuse_port)
