"""The benchmark's numbers from arrival times alone (DESIGN.md, "How speed is measured").

Pure functions, no network: every system (ours, the peers) is reduced to the same
record per stream, when the request was sent and when each piece of its audio arrived,
so TTFP, RTF, throughput and underruns mean the same thing for all of them.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from contract.models import PLAYER_LEAD_S
from perf.tools.playback import stalls_heard
from speechstream.protocol import SERVER_BUSY


@dataclass
class Stream:
    """One utterance as a client saw it: `sent` and arrival times on one clock (s)."""

    sent: float
    arrivals: list[tuple[float, float]] = field(default_factory=list)  # (arrival s, audio end s)
    error: str | None = None
    answered: float | None = None  # when the error arrived, where known
    retry_after_s: float | None = None  # what a refusal said to wait

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.arrivals)

    @property
    def ttfp_s(self) -> float:
        """Request sent → first audio arrived."""
        return self.arrivals[0][0] - self.sent

    @property
    def audio_s(self) -> float:
        return self.arrivals[-1][1]

    @property
    def stall_free_start_s(self) -> float:
        """L_sf: the latest, over the pieces of audio, of arrival − sent − the piece's start
        in media time. A player that starts this long after the request never stalls."""
        starts = [0.0] + [end for _, end in self.arrivals[:-1]]
        return max(at - self.sent - start for (at, _), start in zip(self.arrivals, starts))

    @property
    def refusal_s(self) -> float | None:
        """Request sent → refused (`server_busy`), where it was."""
        return self.answered - self.sent if self.error == SERVER_BUSY and self.answered is not None else None

    @property
    def rtf(self) -> float:
        """Synthesis wall time (sent → last audio) ÷ audio duration."""
        return (self.arrivals[-1][0] - self.sent) / self.audio_s


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), interpolated linearly between ranks as numpy does;
    NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def throughput(streams: Sequence[Stream]) -> float:
    """Audio seconds delivered ÷ wall seconds, from the first request to the last audio."""
    done = [s for s in streams if s.ok]
    if not done:
        return 0.0
    wall = max(s.arrivals[-1][0] for s in done) - min(s.sent for s in streams)
    return sum(s.audio_s for s in done) / wall


def _ms(values_s: Sequence[float], quantiles: Sequence[int]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {f"p{q}": round(percentile(ms, q), 1) for q in quantiles} | {"max": round(max(ms, default=math.nan), 1)}


def summarize(streams: Sequence[Stream], lead_s: float = PLAYER_LEAD_S) -> dict:
    """One concurrency level: TTFP, L_sf and RTF percentiles, throughput, underruns,
    refusals (and how soon they came), errors."""
    done = [s for s in streams if s.ok]
    refused = sum(s.error == SERVER_BUSY for s in streams)
    ttfp_ms = [s.ttfp_s * 1000 for s in done]
    rtf = [s.rtf for s in done]
    heard = [stalls_heard(s.arrivals, lead_s) for s in done]  # each stream's stalls: (where, seconds)
    return {
        "streams": len(streams),
        "refused": refused,  # told `server_busy`: admission at capacity, not a failure
        "errors": len(streams) - len(done) - refused,
        "audio_s": round(sum(s.audio_s for s in done), 2),
        "ttfp_ms": _ms([s.ttfp_s for s in done], (50, 90, 99)),
        "lsf_ms": _ms([s.stall_free_start_s for s in done], (50, 99)),
        "refusal_ms": _ms([t for s in streams if (t := s.refusal_s) is not None], (50, 99)),
        "rtf": {"p50": round(percentile(rtf, 50), 4), "p90": round(percentile(rtf, 90), 4), "max": round(max(rtf, default=math.nan), 4)},
        "throughput_audio_s_per_s": round(throughput(streams), 2),
        "stalls": sum(len(found) for found in heard),
        "stalled_ms": round(sum(seconds for found in heard for _, seconds in found) * 1000, 1),
        "streams_stalled": sum(bool(found) for found in heard),
        # where in their streams' audio the stalls began (s): what traces them to a chunk
        "stalls_at_s": sorted(round(at, 3) for found in heard for at, _ in found),
        "ttfp_samples_ms": [round(v, 1) for v in ttfp_ms],  # for the distribution plot
    }


@dataclass(frozen=True)
class WavLayout:
    """Where a WAV's samples start, and how many bytes make one second of them."""

    data_offset: int
    bytes_per_second: int


def wav_layout(head: bytes) -> WavLayout | None:
    """Parse a RIFF/WAVE header from the first bytes of a body; None until the `data`
    chunk's header has arrived. Walks the chunks, so headers other than the canonical
    44 bytes work too."""
    if len(head) < 12:
        return None
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise ValueError("not a RIFF/WAVE body")
    offset, bytes_per_second = 12, None
    while offset + 8 <= len(head):
        chunk, size = head[offset : offset + 4], struct.unpack_from("<I", head, offset + 4)[0]
        if chunk == b"fmt ":
            if offset + 20 > len(head):  # its byte rate has not arrived yet
                return None
            bytes_per_second = struct.unpack_from("<I", head, offset + 16)[0]
        if chunk == b"data":
            if bytes_per_second is None:
                raise ValueError("WAV data before its fmt chunk")
            return WavLayout(offset + 8, bytes_per_second)
        offset += 8 + size + (size & 1)
    return None


class WavProgress:
    """Turns a WAV body arriving piece by piece into (arrival s, audio end s) entries."""

    def __init__(self) -> None:
        self.head = b""
        self.layout: WavLayout | None = None
        self.received = 0
        self.arrivals: list[tuple[float, float]] = []

    def feed(self, at: float, piece: bytes) -> None:
        self.received += len(piece)
        if self.layout is None:
            self.head += piece
            self.layout = wav_layout(self.head)
            if self.layout is None:
                return
        audio_end = max(0, self.received - self.layout.data_offset) / self.layout.bytes_per_second
        if audio_end > (self.arrivals[-1][1] if self.arrivals else 0.0):
            self.arrivals.append((at, audio_end))
