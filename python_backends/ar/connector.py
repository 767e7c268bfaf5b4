"""The connector between Talker and Code2Wav: which frames of codes each decoder call
speaks, and with what context, as the Talker completes them (sans I/O).

Unlike a Piper sentence, whose frames are all known before vocoding starts, a Talker's
frames arrive one by one and their count is known only at the end. A chunk is decoded
once its frames and its right context have arrived; the decoder's receptive field
reaches across a chunk's edges, so each window carries `left_context` frames before the
chunk and `right_context` after it, whose audio is cut off again. Sizes grow from
`initial_frames` to `frames` (python_backends.chunking.chunk_sizes), as the Piper chain's.
A grown chunk's frames take the Talker longer than the audio in hand may last when many
streams share its batch: a listener about to run dry (`push(..., hurry=True)`) gets the
frames in hand at once, in a chunk of at least HURRY_FRAMES.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from python_backends.chunking import Chunk, ChunkParams, chunk_sizes

# The fewest frames a hurried chunk speaks: fewer would decode mostly context, and a
# stream whose Talker falls behind real time would spend the decoder on context.
HURRY_FRAMES = 4


@dataclass
class FrameChunker:
    """Frames in as the Talker completes them, chunks out as soon as each can be decoded."""

    params: ChunkParams
    arrived: int = 0  # frames the Talker has completed
    spoken: int = 0  # frames the chunks so far speak
    _sizes: Iterator[int] = field(init=False, repr=False)
    _size: int = field(init=False)

    def __post_init__(self) -> None:
        self._sizes = chunk_sizes(self.params.initial_frames, self.params.frames)
        self._size = next(self._sizes)

    def push(self, frames: int, hurry: bool = False) -> list[Chunk]:
        """`frames` more frames arrived; the chunks now complete with their right context.
        With `hurry` (its listener is about to run dry), the frames in hand with their
        right context, when there are HURRY_FRAMES, are a chunk now, and the chunk being
        filled starts after them, at its size."""
        self.arrived += frames
        chunks = []
        while self.arrived >= self.spoken + self._size + self.params.right_context:
            chunks.append(self._chunk(self.spoken + self._size, self.spoken + self._size + self.params.right_context))
            self._size = next(self._sizes)
        ready = self.arrived - self.params.right_context
        if hurry and not chunks and ready - self.spoken >= HURRY_FRAMES:
            chunks.append(self._chunk(ready, self.arrived))
        return chunks

    def finish(self) -> list[Chunk]:
        """The Talker ended: the frames not yet spoken, in one last chunk (none if none)."""
        return [self._chunk(self.arrived, self.arrived)] if self.arrived > self.spoken else []

    def _chunk(self, end: int, window_end: int) -> Chunk:
        chunk = Chunk(self.spoken, end, max(0, self.spoken - self.params.left_context), window_end)
        self.spoken = end
        return chunk
