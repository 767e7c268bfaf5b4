"""The tts stage's core: sentences in, ordered PCM chunks out.

The stages are reached through injected coroutines, so this runs the same against
Triton (BLS calls) and in-process engines (tests). Work is started up to `depth` items
ahead of the one being delivered, so the next sentence's acoustic work and the next
chunk's vocoding overlap delivery, and nothing new is started once the request is
cancelled. Each call carries a deadline from the stream's PlaybackClock: when its
listener will need that audio, so a scheduler can serve the most urgent stream first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from .chunking import Chunk, bucket_frames, chunk_sizes, plan_chunks
from .engines import SAMPLES_PER_FRAME
from .requests import ChunkParams
from .scheduler import PlaybackClock
from .text import Sentence

T = TypeVar("T")
SENTENCE_LOOKAHEAD = 2  # acoustic requests a stream keeps open ahead of delivery
CHUNK_LOOKAHEAD = 2  # vocoder calls a stream keeps open ahead of delivery
# (window [channels, frames], deadline) → PCM [frames · 256]
Vocode = Callable[[np.ndarray, float], Awaitable[np.ndarray]]
# (index, sentence, deadline) → its latent frames
Synthesize = Callable[[int, Sentence, float], Awaitable["LatentSentence"]]


@dataclass(frozen=True)
class LatentSentence:
    """What the tts stage needs of one sentence's acoustic result."""

    index: int
    span: tuple[int, int]
    latent: np.ndarray  # float32 [channels, frames]
    words: tuple[tuple[str, int, int], ...] = ()  # (word, start frame, end frame)


@dataclass(frozen=True)
class PcmChunk:
    index: int
    sample_offset: int
    sentence_index: int
    span: tuple[int, int]
    pcm: np.ndarray  # float32 [samples]
    words: tuple[tuple[str, int, int], ...] = ()  # (word, start, end sample in the stream);
    # on the first chunk of each sentence only


async def ordered(
    jobs: AsyncIterator[tuple[Any, Awaitable[T]]],
    depth: int,
    is_cancelled: Callable[[], bool],
) -> AsyncIterator[tuple[Any, T]]:
    """Run the awaitables of `jobs`, at most `depth` not yet taken by the consumer,
    and yield ``(tag, result)`` in job order. `jobs` is pulled only when a slot is
    free; once `is_cancelled()`, nothing more is started."""
    queue: asyncio.Queue = asyncio.Queue()
    slots = asyncio.Semaphore(depth)

    async def start() -> None:
        try:
            async with aclosing(jobs):
                while True:
                    await slots.acquire()
                    if is_cancelled():
                        return
                    try:
                        tag, work = await anext(jobs)
                    except StopAsyncIteration:
                        return
                    queue.put_nowait((tag, asyncio.ensure_future(work)))
        except Exception as error:  # handed to the consumer, which raises it in order
            queue.put_nowait((None, error))
        finally:
            queue.put_nowait(None)

    starter = asyncio.ensure_future(start())
    try:
        while (item := await queue.get()) is not None:
            tag, work = item
            if isinstance(work, Exception):
                raise work
            result = await work
            slots.release()
            yield tag, result
    finally:
        starter.cancel()
        while not queue.empty():
            item = queue.get_nowait()
            if item is not None and isinstance(item[1], asyncio.Future):
                item[1].cancel()


async def vocode_chunk(vocode: Vocode, latent: np.ndarray, chunk: Chunk, deadline: float, pad: bool) -> np.ndarray:
    """Vocode the chunk's window (zero-padded to its bucket if `pad`) and cut the context off."""
    frames = bucket_frames(chunk.window_frames) if pad else chunk.window_frames
    window = np.zeros((latent.shape[0], frames), dtype=np.float32)
    window[:, : chunk.window_frames] = latent[:, chunk.window_start : chunk.window_end]
    pcm = await vocode(window, deadline)
    first = chunk.lead_frames * SAMPLES_PER_FRAME
    return pcm[first : first + chunk.frames * SAMPLES_PER_FRAME]


async def sentence_latents(
    sentences: Iterable[Sentence],
    synthesize: Synthesize,
    clock: PlaybackClock,
    is_cancelled: Callable[[], bool] = lambda: False,
    depth: int = SENTENCE_LOOKAHEAD,
) -> AsyncIterator[LatentSentence]:
    """Each sentence's latent frames, in order, synthesized up to `depth` ahead. A
    sentence is due when the audio planned before it runs out."""

    async def jobs():
        for index, sentence in enumerate(sentences):
            yield None, synthesize(index, sentence, clock.deadline())

    async for _, latent in ordered(jobs(), depth, is_cancelled):
        yield latent


async def stream_pcm(
    sentences: AsyncIterator[LatentSentence],
    vocode: Vocode,
    chunking: ChunkParams,
    clock: PlaybackClock,
    is_cancelled: Callable[[], bool] = lambda: False,
    depth: int = CHUNK_LOOKAHEAD,
    pad_to_buckets: bool = False,
) -> AsyncIterator[PcmChunk]:
    """Yield the PCM of every sentence, chunk by chunk, in order; the clock starts when
    the first chunk is yielded. Padding windows to buckets lets Triton batch chunks of
    different streams, which pays where batching is cheaper than one call per window
    (a GPU); on a CPU a batch costs as much as its calls, so padding is pure waste."""

    async def jobs():
        sizes = chunk_sizes(chunking.initial_frames, chunking.frames)
        async with aclosing(sentences):
            async for sentence in sentences:
                for chunk in plan_chunks(
                    sentence.latent.shape[1], sizes, chunking.left_context, chunking.right_context
                ):
                    deadline = clock.deadline()
                    clock.planned += chunk.frames * SAMPLES_PER_FRAME
                    yield (sentence, chunk), vocode_chunk(vocode, sentence.latent, chunk, deadline, pad_to_buckets)

    index = offset = 0
    async for (sentence, chunk), pcm in ordered(jobs(), depth, is_cancelled):
        words = ()
        if chunk.start == 0:
            f = SAMPLES_PER_FRAME
            words = tuple((w, offset + a * f, offset + b * f) for w, a, b in sentence.words)
        clock.start()
        yield PcmChunk(index, offset, sentence.index, sentence.span, pcm, words)
        index += 1
        offset += pcm.size
