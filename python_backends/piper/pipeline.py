"""The Piper family's `tts` engine: sentences in, ordered audio chunks out (`speak`).

The stages are reached through a `Stages` object, so this runs the same against Triton
(python_backends.piper.bls) and against in-process engines (tests). Work is started a bounded
way ahead of the chunk being delivered, so the next sentence's acoustic work and the
next chunks' vocoding overlap delivery, and nothing new is started once the request is
cancelled. Each call waits for a slot of the scheduler that all streams share, with a
deadline from the stream's PlaybackClock (when its listener will need that audio), so
the most urgent stream is served first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from contract import models as c
from contract.models import SAMPLES_PER_FRAME, SECONDS_PER_CHAR, Phonemes
from contract.text import Sentence
from python_backends.chunking import Chunk, ChunkParams, bucket_frames, chunk_sizes, grown_size, next_chunk
from python_backends.delivery import AudioChunk, Words, ordered
from python_backends.scheduler import PlaybackClock, Scheduler

SENTENCE_LOOKAHEAD = 2  # acoustic requests a stream keeps open ahead of delivery
CHUNK_LOOKAHEAD = 2  # vocoder calls a stream keeps open ahead of delivery


@dataclass(frozen=True)
class LatentPiece:
    """One acoustic response: the next run of a sentence's latent frames. A sentence's
    first piece also carries its durations (frames per phoneme id, summing to the
    sentence's frames) and its words; later pieces carry empty ones."""

    frames: np.ndarray  # float32 [channels, n]
    durations: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    words: Words = ()  # (word, start frame, end frame) in the sentence

    @property
    def sentence_frames(self) -> int:
        return int(self.durations.sum())


def acoustic_outputs(piece: LatentPiece) -> dict[str, np.ndarray]:
    """The `acoustic` response tensors of one piece."""
    return {
        c.LATENT: piece.frames,
        c.DURATIONS: piece.durations.astype(np.int32),
        c.WORDS: np.array([w.encode() for w, _, _ in piece.words], dtype=object),
        c.WORD_FRAMES: np.array([(a, b) for _, a, b in piece.words], dtype=np.int32).reshape(-1, 2),
    }


class Stages(Protocol):
    """The two stages the tts stage calls, one call per sentence or per chunk."""

    def acoustic_pieces(
        self, text: str, head: int, phonemes: Phonemes = (), head_threads: int = 1, urgent: bool = False
    ) -> AsyncIterator[LatentPiece]:
        """One sentence's latent frames, as the acoustic stage sends them: its first
        `head` frames alone when `head` > 0, then the rest; spans of its text spoken as
        the IPA `phonemes` give; its prior and first piece on up to `head_threads`
        threads; computed above calls that are not `urgent` (Scheduler.run). Nothing is
        asked of the stage before the first piece is awaited, and closing the iterator
        early waits for what was asked."""
        ...

    async def vocode(self, window: np.ndarray, urgent: bool = False) -> np.ndarray:
        """The PCM of a window of latent frames: [channels, frames] → [frames · 256],
        computed above calls that are not `urgent`."""
        ...


class Latent:
    """A sentence's latent frames, [channels, frames], filled front to back as the
    acoustic stage's pieces arrive: a chunk is vocoded once its window is in."""

    def __init__(self, channels: int, frames: int) -> None:
        self.array = np.empty((channels, frames), dtype=np.float32)
        self.filled = 0
        self._error: BaseException | None = None
        self._waiters: list[asyncio.Future] = []

    @property
    def frames(self) -> int:
        return self.array.shape[1]

    @property
    def complete(self) -> bool:
        return self.filled == self.frames

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

    index: int  # in the request
    latent: Latent
    words: Words = ()  # (word, start frame, end frame)


async def speak(
    sentences: Sequence[Sentence],
    stages: Stages,
    *,
    scheduler: Scheduler,
    chunking: ChunkParams,
    head: int,
    clock: PlaybackClock,
    is_cancelled: Callable[[], bool] = lambda: False,
    pad_to_buckets: bool = False,
    grow: bool = True,
    first_floor: Callable[[], int] = lambda: 0,
) -> AsyncIterator[AudioChunk]:
    """The audio of `sentences` (spans of each spoken as its IPA `phonemes`), chunk by
    chunk, in order: one acoustic request per sentence, up to SENTENCE_LOOKAHEAD
    sentences ahead (the first sentence's first `head` frames sent alone, so vocoding
    starts before its flow has run to the end), and CHUNK_LOOKAHEAD vocoder calls ahead
    of delivery. Once `is_cancelled()`, no further
    call is issued; a stage's failure ends the stream with that error. With `grow`, the
    first chunk holds at least `first_floor()` frames, asked when it is issued (see
    stream_pcm)."""
    latents = sentence_latents(sentences, stages, scheduler, head, clock, is_cancelled)
    chunks = stream_pcm(latents, stages, scheduler, chunking, clock, is_cancelled, pad_to_buckets=pad_to_buckets,
                        grow=grow, first_floor=first_floor)
    async with aclosing(chunks):
        async for chunk in chunks:
            yield chunk


async def latent_sentence(
    index: int,
    request: Callable[[int, bool], AsyncIterator[LatentPiece]],
    scheduler: Scheduler,
    deadline: float,
    urgent: bool,
) -> LatentSentence:
    """A sentence's latent as soon as its first piece is in; the rest fills in as the
    pieces of `request(threads, urgent)` come, `threads` being its slot and the slots
    spare when it starts (Scheduler.spare). The reading holds a scheduler slot from its first piece
    to its last, even if the stream is cancelled meanwhile (Triton 2.51's BLS cannot cancel a
    request it has sent, so the stage stays busy anyway). A failure after the first
    piece reaches the latent's readers; one before it is raised here."""
    first: asyncio.Future[LatentSentence] = asyncio.get_running_loop().create_future()

    async def read() -> None:
        latent = None
        pieces = request(1 + scheduler.spare(), urgent)
        try:
            async with aclosing(pieces):
                async for piece in pieces:
                    if latent is None:
                        latent = Latent(piece.frames.shape[0], piece.sentence_frames)
                        first.set_result(LatentSentence(index, latent, piece.words))
                    latent.extend(piece.frames)
        except Exception as error:
            if latent is not None:
                latent.fail(error)
            raise

    work = asyncio.ensure_future(scheduler.run(deadline, read, urgent=urgent))
    await asyncio.wait([first, work], return_when=asyncio.FIRST_COMPLETED)
    if not first.done():
        work.result()  # failed before its first piece: raise that
        raise c.StageError("acoustic sent no frames")
    # A later failure reaches the stream through the latent; this only retrieves it.
    work.add_done_callback(lambda w: w.cancelled() or w.exception())
    return first.result()


def acoustic_request(
    stages: Stages, sentence: Sentence, head: int,
) -> Callable[[int, bool], AsyncIterator[LatentPiece]]:
    """The sentence's acoustic request, given the threads it may use and its urgency: a
    head (a first sentence's prior and first piece, a first packet's compute) takes the
    threads; other work keeps to its slot's one."""
    return lambda threads, urgent: stages.acoustic_pieces(
        sentence.text, head, sentence.phonemes, threads if head else 1, urgent)


async def sentence_latents(
    sentences: Sequence[Sentence],
    stages: Stages,
    scheduler: Scheduler,
    head: int,
    clock: PlaybackClock,
    is_cancelled: Callable[[], bool] = lambda: False,
    depth: int = SENTENCE_LOOKAHEAD,
) -> AsyncIterator[LatentSentence]:
    """Each sentence's latent frames, in order, one acoustic request per sentence issued
    at most `depth` ahead of the sentence being delivered, so that a cancelled stream
    stops acoustic work too, and none but the first before the stream's first audio: a
    later sentence's flow would share the cores with the first packet's. A sentence is
    due when the audio before it runs out: the audio planned so far, or, while the
    sentences before it are not planned yet, their text's likely duration (their
    characters and a space between each)."""

    async def calls():
        chars = 0
        for index, sentence in enumerate(sentences):
            if index:
                await clock.first_audio()
            before = max(clock.planned, round(chars * SECONDS_PER_CHAR * clock.rate))
            request = acoustic_request(stages, sentence, head if index == 0 else 0)
            deadline = clock.deadline(before)
            yield None, latent_sentence(index, request, scheduler, deadline, clock.urgent(deadline))
            chars += len(sentence.text) + 1

    async for _, latent in ordered(calls(), depth, is_cancelled):
        yield latent


async def vocode_chunk(
    stages: Stages, scheduler: Scheduler, latent: Latent, chunk: Chunk, clock: PlaybackClock, deadline: float,
    pad: bool, first: bool,
) -> np.ndarray:
    """Vocode the chunk's window (zero-padded to its bucket if `pad`), once its frames
    are in, and cut the context off. A sentence's first window, in while the rest of the
    sentence is still being read (a first sentence's head), borrows the reading's slot;
    the windows after the stream's `first` wait for its first audio, so that the first
    packet shares the cores with the flow alone, whatever slots are free. Their urgency is
    judged once the first audio is out: the second window is due soon after it."""
    frames = await latent.until(chunk.window_end)
    window = np.zeros((frames.shape[0], bucket_frames(chunk.window_frames) if pad else chunk.window_frames), np.float32)
    window[:, : chunk.window_frames] = frames[:, chunk.window_start : chunk.window_end]
    borrow = chunk.start == 0 and not latent.complete
    if not first:
        await clock.first_audio()
    urgent = clock.urgent(deadline)
    pcm = await scheduler.run(deadline, lambda: stages.vocode(window, urgent), borrow=borrow, urgent=urgent)
    first = chunk.lead_frames * SAMPLES_PER_FRAME
    return pcm[first : first + chunk.frames * SAMPLES_PER_FRAME]


async def stream_pcm(
    sentences: AsyncIterator[LatentSentence],
    stages: Stages,
    scheduler: Scheduler,
    chunking: ChunkParams,
    clock: PlaybackClock,
    is_cancelled: Callable[[], bool] = lambda: False,
    depth: int = CHUNK_LOOKAHEAD,
    pad_to_buckets: bool = False,
    grow: bool = True,
    first_floor: Callable[[], int] = lambda: 0,
) -> AsyncIterator[AudioChunk]:
    """Yield the audio of every sentence, chunk by chunk, in order; the clock starts when
    the first chunk is yielded. Padding windows to buckets lets Triton batch chunks of
    different streams, which pays where batching is cheaper than one call per window
    (a GPU); on a CPU a batch costs as much as its calls, so padding is pure waste.
    With `grow`, the first chunk holds at least `first_floor()` frames (the audio its
    listener needs while other streams' first chunks go before its next:
    chunking.burst_first_frames), and later chunks grow while the stream is ahead
    (chunking.grown_size); without, they keep the sizes `chunking` asks for (a client's
    own)."""

    async def calls():
        sizes = chunk_sizes(chunking.initial_frames, chunking.frames)
        first = True
        async with aclosing(sentences):
            async for sentence in sentences:
                start, frames = 0, sentence.latent.frames
                while start < frames:
                    # Sized when issued: the streams starting and how far ahead this one is decide how large.
                    size = next(sizes)
                    if grow:
                        size = max(size, first_floor()) if first else grown_size(size, chunking.frames, clock.ahead_s())
                    chunk = next_chunk(start, frames, size, chunking.left_context, chunking.right_context)
                    deadline = clock.deadline()
                    clock.planned += chunk.frames * SAMPLES_PER_FRAME
                    work = vocode_chunk(stages, scheduler, sentence.latent, chunk, clock, deadline, pad_to_buckets, first)
                    first = False
                    yield (sentence, chunk), work
                    start = chunk.end

    offset = 0
    async for (sentence, chunk), pcm in ordered(calls(), depth, is_cancelled):
        words = ()
        if chunk.start == 0:
            f = SAMPLES_PER_FRAME
            words = tuple((w, offset + a * f, offset + b * f) for w, a, b in sentence.words)
        clock.start()
        yield AudioChunk(pcm, sentence.index, words)
        offset += pcm.size
