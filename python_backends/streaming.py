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

from . import contract as c
from .contract import SAMPLES_PER_FRAME
from .chunking import Chunk, bucket_frames, chunk_sizes, plan_chunks
from .requests import ChunkParams
from .scheduler import PlaybackClock
from .text import Sentence

T = TypeVar("T")
SENTENCE_LOOKAHEAD = 2  # acoustic requests a stream keeps open ahead of delivery
CHUNK_LOOKAHEAD = 2  # vocoder calls a stream keeps open ahead of delivery
SECONDS_PER_CHAR = 0.05  # of speech per character of text; 0.054-0.056 on the Harvard texts
# (window [channels, frames], deadline) → PCM [frames · 256]
Vocode = Callable[[np.ndarray, float], Awaitable[np.ndarray]]
# (index, sentence, deadline) → its latent frames
Synthesize = Callable[[int, Sentence, float], Awaitable["LatentSentence"]]


class Latent:
    """A sentence's latent frames, [channels, frames], filled front to back as the
    acoustic stage's pieces arrive: a chunk is vocoded once its window is in."""

    def __init__(self, channels: int, frames: int) -> None:
        self.array = np.empty((channels, frames), dtype=np.float32)
        self.filled = 0
        self._error: BaseException | None = None
        self._waiters: list[asyncio.Future] = []

    @classmethod
    def whole(cls, array: np.ndarray) -> Latent:
        latent = cls(*array.shape)
        latent.extend(array)
        return latent

    @property
    def frames(self) -> int:
        return self.array.shape[1]

    def extend(self, piece: np.ndarray) -> None:
        """The next frames, after those filled so far."""
        end = self.filled + piece.shape[1]
        if end > self.frames:
            raise ValueError(f"{end} frames of a sentence of {self.frames}")
        self.array[:, self.filled : end] = piece
        self.filled = end
        self._wake()

    def fail(self, error: BaseException) -> None:
        """The rest will not come: whoever waits for it gets `error`."""
        self._error = error
        self._wake()

    async def until(self, frames: int) -> np.ndarray:
        """The array, once its first `frames` frames are filled."""
        while self.filled < frames:
            if self._error is not None:
                raise self._error
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        return self.array

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()


@dataclass(frozen=True)
class LatentSentence:
    """What the tts stage needs of one sentence's acoustic result."""

    index: int
    span: tuple[int, int]
    latent: Latent
    words: tuple[tuple[str, int, int], ...] = ()  # (word, start frame, end frame)


@dataclass(frozen=True)
class LatentPiece:
    """One acoustic response: the next run of a sentence's latent frames; the first piece
    of a sentence also carries the sentence's frame count and its words."""

    frames: np.ndarray  # float32 [channels, n]
    sentence_frames: int = 0
    words: tuple[tuple[str, int, int], ...] = ()


async def latent_sentence(
    index: int,
    span: tuple[int, int],
    pieces: Callable[[], AsyncIterator[LatentPiece]],
    run: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]],
) -> LatentSentence:
    """A sentence's latent as soon as its first piece is in; the rest fills in as
    `pieces()` yields it. `run(read)` runs the whole reading (a scheduler holds its slot
    to the last piece); a failure after the first piece reaches the latent's readers, one
    before it is raised here."""
    first: asyncio.Future[LatentSentence] = asyncio.get_running_loop().create_future()

    async def read() -> None:
        latent = None
        try:
            async with aclosing(pieces()) as stream:
                async for piece in stream:
                    if latent is None:
                        latent = Latent(piece.frames.shape[0], piece.sentence_frames)
                        first.set_result(LatentSentence(index, span, latent, piece.words))
                    latent.extend(piece.frames)
        except Exception as error:
            if latent is not None:
                latent.fail(error)
            raise

    work = asyncio.ensure_future(run(read))
    await asyncio.wait([first, work], return_when=asyncio.FIRST_COMPLETED)
    if not first.done():
        work.result()  # failed before its first piece: raise that
        raise c.StageError("acoustic sent no frames")
    # A later failure reaches the stream through the latent; this only retrieves it.
    work.add_done_callback(lambda w: w.cancelled() or w.exception())
    return first.result()


@dataclass(frozen=True)
class PcmChunk:
    index: int
    sample_offset: int
    sentence_index: int
    span: tuple[int, int]
    pcm: np.ndarray  # float32 [samples]
    words: tuple[tuple[str, int, int], ...] = ()  # (word, start, end sample in the stream);
    # on the first chunk of each sentence only


def tts_outputs(chunk: PcmChunk) -> dict[str, np.ndarray]:
    """The `tts` response tensors of one chunk."""
    outputs = {
        c.PCM: chunk.pcm,
        c.CHUNK_INDEX: np.array([chunk.index], dtype=np.int32),
        c.SAMPLE_OFFSET: np.array([chunk.sample_offset], dtype=np.int64),
        c.SENTENCE_INDEX: np.array([chunk.sentence_index], dtype=np.int32),
        c.TEXT_SPAN: np.array(chunk.span, dtype=np.int32),
    }
    if chunk.words:
        outputs[c.WORDS] = np.array([w.encode() for w, _, _ in chunk.words], dtype=object)
        outputs[c.WORD_SAMPLES] = np.array([(a, b) for _, a, b in chunk.words], dtype=np.int64)
    return outputs


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


async def vocode_chunk(vocode: Vocode, latent: Latent, chunk: Chunk, deadline: float, pad: bool) -> np.ndarray:
    """Vocode the chunk's window (zero-padded to its bucket if `pad`), once its frames
    are in, and cut the context off."""
    frames = await latent.until(chunk.window_end)
    window = np.zeros((frames.shape[0], bucket_frames(chunk.window_frames) if pad else chunk.window_frames), np.float32)
    window[:, : chunk.window_frames] = frames[:, chunk.window_start : chunk.window_end]
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
    sentence is due when the audio before it runs out: the audio planned so far, or,
    while the sentences before it are not planned yet, their text's likely duration."""

    async def jobs():
        for index, sentence in enumerate(sentences):
            before = max(clock.planned, round(sentence.start * SECONDS_PER_CHAR * clock.rate))
            yield None, synthesize(index, sentence, clock.deadline(before))

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
                    sentence.latent.frames, sizes, chunking.left_context, chunking.right_context
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
