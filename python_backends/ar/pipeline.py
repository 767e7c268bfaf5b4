"""tts_ar's engine: sentences → Talker frames → chunked Code2Wav → PCM chunks, streamed
(no Triton here: the stages are given, as BLS requests in the model, in process in tests).

Each sentence is one Talker request, so a generation stays bounded and every chunk knows
its sentence. The frames of a sentence go to Code2Wav in chunks as the connector plans
them (python_backends.ar.connector), each decoded with its context, the context's audio
cut off again.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .. import contract as c
from ..chunking import Chunk, ChunkParams
from ..text import Sentence
from .connector import FrameChunker


class ArStages(Protocol):
    def talk(self, text: str) -> AsyncIterator[np.ndarray]:
        """The frames of one sentence, [n, positions] codes at a time."""

    async def decode(self, window: np.ndarray) -> np.ndarray:
        """A window of frames, [frames, positions] → its PCM, samples_per_frame a frame."""


@dataclass(frozen=True)
class ArChunk:
    pcm: np.ndarray  # float32 at the codec's rate
    index: int  # 0, 1, 2, ... across the request
    sample_offset: int  # first sample of this chunk in the stream
    sentence_index: int
    text_span: tuple[int, int]  # the sentence's [start, end) in the text
    frames_in_s: float  # since the request started: when the Talker had written the chunk's window
    decoded_s: float  # and when Code2Wav had decoded it: the first chunk's split of the first packet


async def speak(
    sentences: Sequence[Sentence], stages: ArStages, chunking: ChunkParams, samples_per_frame: int,
    is_cancelled: Callable[[], bool] = lambda: False,
) -> AsyncIterator[ArChunk]:
    """The request's audio in chunks, sentence after sentence; stops when cancelled."""
    index = offset = 0
    start = time.monotonic()
    for number, sentence in enumerate(sentences):
        pieces = _sentence_audio(sentence.text, stages, chunking, samples_per_frame, is_cancelled)
        async for pcm, frames_in, decoded in pieces:
            yield ArChunk(pcm, index, offset, number, (sentence.start, sentence.end), frames_in - start, decoded - start)
            index, offset = index + 1, offset + pcm.size
        if is_cancelled():
            return


async def _sentence_audio(
    text: str, stages: ArStages, chunking: ChunkParams, samples_per_frame: int, is_cancelled: Callable[[], bool]
) -> AsyncIterator[tuple[np.ndarray, float, float]]:
    """Each chunk's PCM, with when its frames were in and when it was decoded."""
    chunker, frames = FrameChunker(chunking), []
    async with aclosing(stages.talk(text)) as talk:
        async for new in talk:
            frames.append(new)
            for chunk in chunker.push(len(new)):
                if is_cancelled():  # checked where work is issued: the Talker stops with the loop
                    return
                yield await _decode(stages, np.concatenate(frames), chunk, samples_per_frame)
    for chunk in chunker.finish():
        if is_cancelled():
            return
        yield await _decode(stages, np.concatenate(frames), chunk, samples_per_frame)


async def _decode(
    stages: ArStages, frames: np.ndarray, chunk: Chunk, samples_per_frame: int
) -> tuple[np.ndarray, float, float]:
    frames_in = time.monotonic()
    pcm = await stages.decode(frames[chunk.window_start : chunk.window_end])
    spoken = pcm[chunk.lead_frames * samples_per_frame : (chunk.lead_frames + chunk.frames) * samples_per_frame]
    return spoken, frames_in, time.monotonic()


def ar_outputs(chunk: ArChunk) -> dict[str, np.ndarray]:
    """A chunk as tts_ar's output tensors."""
    return {
        c.PCM: chunk.pcm.astype(np.float32),
        c.CHUNK_INDEX: np.array([chunk.index], dtype=np.int32),
        c.SAMPLE_OFFSET: np.array([chunk.sample_offset], dtype=np.int64),
        c.SENTENCE_INDEX: np.array([chunk.sentence_index], dtype=np.int32),
        c.TEXT_SPAN: np.array(chunk.text_span, dtype=np.int32),
    }
