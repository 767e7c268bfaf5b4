"""Audio containers for files and HTTP bodies, sans I/O: the gateway's frames go in, the
container's bytes come out as soon as the muxer has them, so a body can stream.

Formats are named as OpenAI's speech API names them: `pcm` (raw s16le mono), `wav`,
`flac`, `opus` (Opus in Ogg), `mp3` and `aac` (AAC in ADTS). Opus packets are muxed as
they are, never re-encoded, one Ogg page per packet so that a body streams as fast as
PCM; the others are encoded from s16le PCM frames. PyAV (FFmpeg) writes the containers
and encodes mp3 (LAME) and aac (FFmpeg's own encoder): it is already here for the
containers, so the two formats cost no new dependency. Their encoders hold about 70 ms
(mp3) and 100 ms (aac) of audio before their first frame: the codecs' own look-ahead.
"""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np

CONTENT_TYPES = {
    "pcm": "audio/pcm", "wav": "audio/wav", "flac": "audio/flac", "opus": "audio/ogg", "mp3": "audio/mpeg",
    "aac": "audio/aac",
}
# The gateway frame format each container is fed with.
FRAME_FORMATS = {fmt: "opus" if fmt == "opus" else "pcm_s16le" for fmt in CONTENT_TYPES}
_MUXERS = {"opus": "ogg", "aac": "adts"}
_CODECS = {"wav": "pcm_s16le", "mp3": "libmp3lame"}
# Mono speech at 24 kHz: transparent enough at these rates, a quarter of OpenAI's 160 kb/s mp3.
LOSSY_BIT_RATE = 64_000
# The Ogg muxer holds a page until it spans 1 s by default; a page per 20 ms packet
# (about 14 bytes more each) lets an Ogg Opus body start as soon as a raw one would.
OGG_PAGE_US = 20_000


class _Sink(io.RawIOBase):
    """A write-only, unseekable file for PyAV: it keeps what the muxer wrote until taken."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, data) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data, self._chunks = b"".join(self._chunks), []
        return data


class ContainerWriter:
    """Frames of `frame_samples` samples at `rate` in, container bytes out; or, given a
    seekable `file`, written into it (the muxer then completes WAV and FLAC headers).
    Streamed, those headers say their length is unknown, as FFmpeg writes them: WAV sizes
    0xFFFFFFFF, FLAC total_samples 0, which libsndfile cannot read
    (docs/http-api.md#streamed-or-whole)."""

    def __init__(self, fmt: str, rate: int, frame_samples: int, file: io.IOBase | None = None) -> None:
        if fmt not in CONTENT_TYPES:
            raise ValueError(f"unknown container {fmt!r}; one of {', '.join(CONTENT_TYPES)}")
        self.format = fmt
        self._rate, self._frame_samples = rate, frame_samples
        self._sink = _Sink()
        self._file = file
        self._container = None
        if fmt != "pcm":
            options = {"page_duration": str(OGG_PAGE_US)} if fmt == "opus" else {}
            self._container = av.open(file or self._sink, "w", format=_MUXERS.get(fmt, fmt), options=options)
            self._stream = self._container.add_stream(_CODECS.get(fmt, fmt), rate=rate)
            self._stream.layout = "mono"
            if fmt in ("mp3", "aac"):
                self._stream.bit_rate = LOSSY_BIT_RATE
            self._stream.time_base = Fraction(1, rate)

    def push(self, payload: bytes, sample_offset: int) -> bytes:
        """One frame's payload (an Opus packet for `opus`, s16le PCM otherwise)."""
        if self._container is None:
            return self._out(payload)
        if self.format == "opus":
            packet = av.Packet(payload)
            packet.stream, packet.time_base = self._stream, self._stream.time_base
            packet.pts = packet.dts = sample_offset
            packet.duration = self._frame_samples
            self._container.mux(packet)
        else:
            frame = av.AudioFrame.from_ndarray(np.frombuffer(payload, "<i2")[None], format="s16", layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = self._rate, sample_offset, self._stream.time_base
            self._container.mux(self._stream.encode(frame))
        return self._out(self._sink.take())

    def finish(self) -> bytes:
        """The container's last bytes (buffered encoder output, trailers)."""
        if self._container is not None:
            if self.format != "opus":
                self._container.mux(self._stream.encode(None))
            self._container.close()
        return self._sink.take()

    def _out(self, data: bytes) -> bytes:
        if self._file is None:
            return data
        self._file.write(data)  # pcm only: the muxer writes into the file itself
        return b""
