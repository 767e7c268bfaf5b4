"""How far a connection's audio is ahead of its client, sans I/O: the seconds of audio
sent that the client has not taken yet.

Each message sent is marked with its bytes and the audio it carries. The shell asks
with the bytes still unsent on its side (the transport's write buffer and the kernel's
send queue, which holds what the client's TCP has not acknowledged); what came before
them the client has taken. What the client's own receive buffer holds counts as taken:
it cannot be seen from here.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
from collections import deque


class Backlog:
    """A connection's audio not yet taken by its client."""

    def __init__(self, now: float = 0.0) -> None:
        self.sent_bytes = 0
        self.taken_bytes = 0  # of those, what the client has taken, as last asked
        self.taken_at = now  # when it last took some, or the backlog began
        self._marks: deque[tuple[int, float]] = deque()  # (bytes sent once the message is out, its audio s)
        self._audio_s = 0.0  # the audio of the marks kept

    def sent(self, size: int, audio_s: float) -> None:
        """A message of `size` bytes, carrying `audio_s` of audio, was handed to the transport."""
        self.sent_bytes += size
        if audio_s:
            self._marks.append((self.sent_bytes, audio_s))
            self._audio_s += audio_s

    def unread_s(self, unsent_bytes: int, now: float) -> float:
        """The audio of the messages not all of whose bytes have left, with `unsent_bytes`
        of all sent not yet taken by the client at `now`."""
        taken = self.sent_bytes - unsent_bytes
        if taken > self.taken_bytes:
            self.taken_bytes, self.taken_at = taken, now
        while self._marks and self._marks[0][0] <= taken:
            self._audio_s -= self._marks.popleft()[1]
        if not self._marks:
            self._audio_s = 0.0  # no float drift left behind
        return self._audio_s

    def stalled_s(self, now: float) -> float:
        """How long audio has waited with the client taking none of it (0 with none waiting)."""
        return now - self.taken_at if self._marks else 0.0


def frame_bytes(payload: int) -> int:
    """A server's WebSocket frame of `payload` bytes, its header included (RFC 6455 5.2:
    unmasked, the length in 7, 16 or 64 bits): the bytes the transport counts."""
    return payload + (2 if payload <= 125 else 4 if payload <= 0xFFFF else 10)


def kernel_unsent(sock: socket.socket | None) -> int:
    """Bytes in the socket's send queue that its peer has not acknowledged (SIOCOUTQ)."""
    if sock is None:
        return 0
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except OSError:  # closed meanwhile
        return 0
