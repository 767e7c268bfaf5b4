"""The tts stage's core: sentences of latent frames in, ordered PCM chunks out.

The vocoder is reached through an injected coroutine, so this runs the same against
Triton (BLS calls) and in-process engines (tests). Chunks are vocoded up to `depth`
ahead of the one being delivered, so batching and the next chunk's work overlap
delivery, and nothing is issued once the request is cancelled.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from .chunking import Chunk, bucket_frames, chunk_sizes, plan_chunks
from .engines import SAMPLES_PER_FRAME

Vocode = Callable[[np.ndarray], Awaitable[np.ndarray]]  # [channels, frames] → [frames · 256]


@dataclass(frozen=True)
class LatentSentence:
    """What the tts stage needs of one acoustic response."""

    index: int
    span: tuple[int, int]
    latent: np.ndarray  # float32 [channels, frames]


@dataclass(frozen=True)
class PcmChunk:
    index: int
    sample_offset: int
    sentence_index: int
    span: tuple[int, int]
    pcm: np.ndarray  # float32 [samples]


async def vocode_chunk(vocode: Vocode, latent: np.ndarray, chunk: Chunk) -> np.ndarray:
    """Vocode the chunk's window, zero-padded to its bucket, and cut the context off."""
    window = np.zeros((latent.shape[0], bucket_frames(chunk.window_frames)), dtype=np.float32)
    window[:, : chunk.window_frames] = latent[:, chunk.window_start : chunk.window_end]
    pcm = await vocode(window)
    first = chunk.lead_frames * SAMPLES_PER_FRAME
    return pcm[first : first + chunk.frames * SAMPLES_PER_FRAME]


async def stream_pcm(
    sentences: AsyncIterator[LatentSentence],
    vocode: Vocode,
    initial_frames: int,
    chunk_frames: int,
    left_context: int,
    right_context: int,
    is_cancelled: Callable[[], bool] = lambda: False,
    depth: int = 2,
) -> AsyncIterator[PcmChunk]:
    """Yield the PCM of every sentence, chunk by chunk, in order."""
    queue: asyncio.Queue = asyncio.Queue()
    slots = asyncio.Semaphore(depth)

    async def issue() -> None:
        sizes = chunk_sizes(initial_frames, chunk_frames)
        try:
            async with aclosing(sentences):
                async for sentence in sentences:
                    for chunk in plan_chunks(sentence.latent.shape[1], sizes, left_context, right_context):
                        await slots.acquire()
                        if is_cancelled():
                            return
                        work = asyncio.ensure_future(vocode_chunk(vocode, sentence.latent, chunk))
                        queue.put_nowait((sentence, work))
        except Exception as error:  # handed to the consumer, which raises it in order
            queue.put_nowait((None, error))
        finally:
            queue.put_nowait(None)

    producer = asyncio.ensure_future(issue())
    index = offset = 0
    try:
        while (item := await queue.get()) is not None:
            sentence, work = item
            if sentence is None:
                raise work
            pcm = await work
            slots.release()
            yield PcmChunk(index, offset, sentence.index, sentence.span, pcm)
            index += 1
            offset += pcm.size
    finally:
        producer.cancel()
        while not queue.empty():
            item = queue.get_nowait()
            if item is not None and isinstance(item[1], asyncio.Future):
                item[1].cancel()
