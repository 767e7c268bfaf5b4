"""Greedy and hostile clients on plain sockets, for the flood tests and perf.gateway.fairness.

Each comes from a given loopback source address (all of 127.0.0.0/8 is loopback on
Linux), as clients on distinct hosts would, and never reads what the gateway sends
unless told to.
"""

from __future__ import annotations

import json
import socket

from websockets.frames import Frame, Opcode

from speechstream import protocol as v1

HANDSHAKE = (f"GET {v1.PROTOCOL_PATH} HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()


def connect(port: int, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))


def non_reading_websockets(port: int, source: str, n: int, text: str) -> list[socket.socket]:
    """`n` WebSocket clients that each speak `text` and never read the answer."""
    speak = json.dumps({"type": "speak", "context_id": "c", "text": text}).encode()
    sockets = [connect(port, source) for _ in range(n)]
    for sock in sockets:
        sock.sendall(HANDSHAKE + Frame(Opcode.TEXT, speak).serialize(mask=True))
    return sockets


def speech_posts(port: int, source: str, n: int, text: str) -> list[socket.socket]:
    """`n` concurrent `POST /v1/audio/speech` of `text`, none of them read."""
    body = json.dumps({"model": "tts-1", "voice": "alloy", "input": text}).encode()
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    sockets = [connect(port, source) for _ in range(n)]
    for sock in sockets:
        sock.sendall(head + body)
    return sockets


def status(sock: socket.socket) -> int:
    """The HTTP status the gateway answered on `sock` (reads the status line only)."""
    line = b""
    while not line.endswith(b"\r\n") and (byte := sock.recv(1)):
        line += byte
    return int(line.split()[1])


def slow_heads(port: int, sources: list[str], per_source: int) -> list[socket.socket]:
    """Slow-loris clients: each sends the start of a request head and then nothing."""
    sockets = [connect(port, source) for source in sources for _ in range(per_source)]
    for sock in sockets:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
    return sockets
