"""Chunk planning: which latent frames each vocoder call speaks, and with what context.

Pure functions. The vocoder is convolutional, so a chunk vocoded with enough frames of
context on both sides sounds like the same frames vocoded within the whole sentence;
the context's audio is cut off again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from contract.models import VOCODER_BUCKETS

# A stream this far ahead of its listener (s of audio in hand) takes chunks GROWTH times
# the largest (grown_size).
GROW_AHEAD_S = 1.0
GROWTH = 2


@dataclass(frozen=True)
class ChunkParams:
    """A stream's chunking: the first chunk's frames, the largest chunk's, and the
    vocoder context frames on each side of a chunk."""

    initial_frames: int
    frames: int
    left_context: int
    right_context: int


@dataclass(frozen=True)
class Chunk:
    """Frames ``[start, end)`` are spoken; ``[window_start, window_end)`` are vocoded."""

    start: int
    end: int
    window_start: int
    window_end: int

    @property
    def frames(self) -> int:
        return self.end - self.start

    @property
    def window_frames(self) -> int:
        return self.window_end - self.window_start

    @property
    def lead_frames(self) -> int:
        """Left-context frames to cut from the front of the vocoded window."""
        return self.start - self.window_start


def chunk_sizes(initial: int, size: int) -> Iterator[int]:
    """initial, 2·initial, 4·initial, … up to `size`, then `size` for ever: a small
    first chunk for a fast first packet, larger ones for less context overhead."""
    current = min(initial, size)
    while True:
        yield current
        current = min(current * 2, size)


def next_chunk(start: int, frames: int, size: int, left: int, right: int) -> Chunk:
    """The chunk of `size` frames from `start` in a sentence of `frames` latent frames. A
    remainder shorter than half of it is merged into it, so no call vocodes mostly
    context. Context is clipped at the sentence's edges."""
    end = min(start + size, frames)
    if frames - end < size // 2:
        end = frames
    return Chunk(start, end, max(0, start - left), min(frames, end + right))


def grown_size(size: int, largest: int, ahead_s: float) -> int:
    """The next chunk's size for a stream whose listener has `ahead_s` of audio in hand:
    `size` while that is little; GROWTH × `largest` once it covers a grown call's wait
    and compute several times over. Fewer, longer calls spend fewer context frames, and
    a sentence's last chunk then often reaches its end (no right context, and exactly
    the whole sentence's audio there)."""
    return max(size, GROWTH * largest) if ahead_s >= GROW_AHEAD_S else size


def burst_first_frames(others_starting: int, slots: int, largest: int) -> int:
    """The least frames a stream's first chunk holds while other streams start with it:
    their first chunks are due now, so they all go before this stream's next chunk, and
    its listener plays the first meanwhile. Once they fill a round of the slots, the
    largest chunk's, so that its audio lasts until that round is done; otherwise no
    floor, since a larger first chunk takes longer to make (docs/design.md, First chunk
    from load)."""
    return largest if others_starting >= slots else 0


def first_chunk_frames(initial: int, asked: bool, loaded: bool) -> int:
    """The first chunk's size for a stream: the client's own choice stands; otherwise
    `initial` while its calls can have a slot (a small first chunk buys time to first
    audio), and 8 × `initial` once they would queue (`loaded`: its client's streams
    outnumber its share of the slots, and some other stream is too close to its listener
    to wait): the first chunk's audio is then the player's only cushion until the next
    call gets a slot, and fewer, longer chunks spend fewer context frames; so a loaded
    stream trades some time to first audio for fewer stalls and more throughput
    (docs/design.md, First chunk from load)."""
    return initial if asked or not loaded else 8 * initial


def sized_for_load(params: ChunkParams, asked: bool, loaded: bool) -> tuple[ChunkParams, int]:
    """A stream's chunking, its first chunk sized for the load (first_chunk_frames), and
    the head frames its first sentence's acoustic request sends alone: none under load,
    where the first audio waits for a slot anyway."""
    params = replace(params, initial_frames=first_chunk_frames(params.initial_frames, asked, loaded))
    return params, 0 if loaded else head_frames(params.initial_frames, params.frames, params.right_context)


def head_frames(initial: int, size: int, right: int) -> int:
    """Frames the first vocoder calls of a stream need (the first two chunks and the
    second's right context): the acoustic stage sends these of the first sentence
    first, so vocoding starts before that sentence's flow has run to its end."""
    sizes = chunk_sizes(initial, size)
    return next(sizes) + next(sizes) + right


def flow_pieces(frames: int, head: int, context: int) -> list[tuple[int, int]]:
    """The [start, end) frames the acoustic stage makes a sentence of `frames` in: the
    first `head` alone, then the rest, when the rest outweighs the `context` frames a
    second piece recomputes; otherwise the whole sentence at once."""
    if 0 < head and frames - head > context:
        return [(0, head), (head, frames)]
    return [(0, frames)]


def bucket_frames(frames: int) -> int:
    """The padded window length for a window of `frames`: the smallest bucket that
    holds it, or a multiple of the largest bucket's step past the last one."""
    for bucket in VOCODER_BUCKETS:
        if frames <= bucket:
            return bucket
    step = VOCODER_BUCKETS[-1] - VOCODER_BUCKETS[-2]
    return VOCODER_BUCKETS[-1] + -(-(frames - VOCODER_BUCKETS[-1]) // step) * step
