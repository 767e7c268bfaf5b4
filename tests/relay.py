"""A TCP relay on loopback in front of a server, which can hold a gRPC server's answers.

The fleet test puts one in front of a tritonserver to keep a gateway's readiness probe
under way for as long as it wants, Triton itself untouched: a stub stopped instead is
found unhealthy by Triton 2.51 after about a second of a request waiting on it, and
aborts tritonserver when it continues (docs/known-limits.md)."""

import contextlib
import socket
import threading
from collections.abc import Iterator

FRAME_HEADER = 9  # an HTTP/2 frame's: length (3 bytes), type, flags, stream id (4 bytes)


class Relay:
    """Forwards each connection to (host, port) on `listen` to `target`. With `http2`,
    the server's side is read as HTTP/2 frames, and while `hold` is in force every frame
    of a stream after a connection's first (a gateway's first call on a new channel is
    its is-ready check, its next the probe) is kept back, with every frame of any stream
    after it (header blocks must reach the client in order); frames of the connection
    itself (settings, pings, its flow window) pass. `release` sends what was held, in order."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], http2: bool = False) -> None:
        self.target, self.http2 = target, http2
        self._server = socket.create_server(listen)
        self._lock = threading.Lock()  # over holding, each connection's held frames and its sends
        self._holding = False
        self._held: dict[socket.socket, list[bytes]] = {}  # by the client's socket
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="relay-accept").start()

    def hold(self) -> None:
        with self._lock:
            self._holding = True

    def release(self) -> None:
        with self._lock:
            self._holding = False
            for client, frames in self._held.items():
                with contextlib.suppress(OSError):
                    client.sendall(b"".join(frames))
                frames.clear()

    def close(self) -> None:
        self._server.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            self._held[client] = []
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            answers = self._frames if self.http2 else self._pump
            threading.Thread(target=answers, args=(server, client), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def _frames(self, server: socket.socket, client: socket.socket) -> None:
        buffer, first_stream = b"", None
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                buffer += data
                while len(buffer) >= FRAME_HEADER and len(buffer) >= (size := FRAME_HEADER + int.from_bytes(buffer[:3])):
                    frame, buffer = buffer[:size], buffer[size:]
                    stream = int.from_bytes(frame[5:9]) & 0x7FFFFFFF
                    if first_stream is None and stream:  # stream 0 is the connection's own
                        first_stream = stream
                    self._send(client, frame, stream, first_stream)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)

    def _send(self, client: socket.socket, frame: bytes, stream: int, first_stream: int | None) -> None:
        with self._lock:
            held = self._held[client]
            if stream and (held or (self._holding and stream != first_stream)):
                held.append(frame)
            else:
                client.sendall(frame)


@contextlib.contextmanager
def relaying(listen: tuple[str, int], target: tuple[str, int], http2: bool = False) -> Iterator[Relay]:
    relay = Relay(listen, target, http2)
    try:
        yield relay
    finally:
        relay.close()
