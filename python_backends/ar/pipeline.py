"""tts_ar's engine: sentences → Talker frames → chunked Code2Wav → PCM chunks, streamed
(no Triton here: the stages are given, as BLS requests in the model, in process in tests).

Each sentence is one Talker request, so a generation stays bounded and every chunk knows
its sentence. The frames of a sentence go to Code2Wav in chunks as the connector plans
them (python_backends.ar.connector), each decoded with its context, the context's audio
cut off again. A listener with less than HURRY_S of audio in hand gets the frames that
are in at once, rather than after the rest of a grown chunk.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from typing import Protocol

import numpy as np

from contract.text import Sentence
from python_backends.ar.connector import FrameChunker
from python_backends.chunking import Chunk, ChunkParams
from python_backends.delivery import AudioChunk
from python_backends.scheduler import PlaybackClock

# The audio in hand below which a stream's frames are decoded as they are (the
# connector's hurry): a decode and its delivery take well under it, a Talker's output
# comes every few tens of ms, and the gateway holds a start until its continuation is
# safe, so the listener has this much more.
HURRY_S = 0.3


class Stages(Protocol):
    def talk(self, text: str) -> AsyncIterator[np.ndarray]:
        """The frames of one sentence, [n, positions] codes at a time."""

    async def decode(self, window: np.ndarray) -> np.ndarray:
        """A window of frames, [frames, positions] → its PCM, samples_per_frame a frame."""


async def speak(
    sentences: Sequence[Sentence], stages: Stages, chunking: ChunkParams, samples_per_frame: int,
    clock: PlaybackClock, is_cancelled: Callable[[], bool] = lambda: False,
    first_chunk: Callable[[float, float], None] = lambda *_: None,
) -> AsyncIterator[AudioChunk]:
    """The request's audio in chunks, sentence after sentence; stops when cancelled.
    `clock` is the listener's, started at the first chunk. `first_chunk` is told when
    the first chunk's frames were in and when they were decoded, in seconds since the
    start: the Talker's and Code2Wav's parts of the first packet."""
    start = time.monotonic()
    for number, sentence in enumerate(sentences):
        if is_cancelled():  # before the sentence's Talker request is issued, not after its first frames
            return
        # Closed with this generator: the reader that stops at a chunk (tts_ar's serve loop,
        # which saw the cancel while the chunk was decoded) closes the sentence's Talker
        # stream, and so sends its STOP, before the request ends. Left to the garbage
        # collector, the STOP went out later from a task of asyncio's async-generator
        # finalizer, after the final response, as timing and reference cycles allowed.
        pieces = _sentence_audio(sentence.text, stages, chunking, samples_per_frame, is_cancelled, clock)
        async with aclosing(pieces):
            async for pcm, frames_in, decoded in pieces:
                if start is not None:
                    first_chunk(frames_in - start, decoded - start)
                    start = None
                clock.start()
                clock.planned += pcm.size
                yield AudioChunk(pcm, number)


async def _sentence_audio(
    text: str, stages: Stages, chunking: ChunkParams, samples_per_frame: int, is_cancelled: Callable[[], bool],
    clock: PlaybackClock,
) -> AsyncIterator[tuple[np.ndarray, float, float]]:
    """Each chunk's PCM, with when its frames were in and when it was decoded; a chunk
    cut short when the listener (`clock`) has less than HURRY_S in hand."""
    chunker, frames = FrameChunker(chunking), []
    async with aclosing(stages.talk(text)) as talk:
        async for new in talk:
            # Checked where work is issued: at each of the Talker's outputs (a grown chunk
            # is hundreds of frames the engine would go on writing for nobody) and before
            # each decode. The Talker stops with the loop.
            if is_cancelled():
                return
            frames.append(new)
            hurry = clock.started is not None and clock.ahead_s() < HURRY_S
            for chunk in chunker.push(len(new), hurry):
                if is_cancelled():
                    return
                yield await _decode(stages, np.concatenate(frames), chunk, samples_per_frame)
    for chunk in chunker.finish():
        if is_cancelled():
            return
        yield await _decode(stages, np.concatenate(frames), chunk, samples_per_frame)


async def _decode(
    stages: Stages, frames: np.ndarray, chunk: Chunk, samples_per_frame: int
) -> tuple[np.ndarray, float, float]:
    frames_in = time.monotonic()
    pcm = await stages.decode(frames[chunk.window_start : chunk.window_end])
    spoken = pcm[chunk.lead_frames * samples_per_frame : (chunk.lead_frames + chunk.frames) * samples_per_frame]
    return spoken, frames_in, time.monotonic()
