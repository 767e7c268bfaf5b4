"""What both families' BLS models share once they have audio: work run a bounded way
ahead and delivered in order (`ordered`), the audio chunk a stream yields
(`AudioChunk`), and the one response contract of `tts` and `tts_ar` (`chunk_outputs`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from contract import models as c

T = TypeVar("T")
Words = tuple[tuple[str, int, int], ...]  # (word, start, end), in frames or samples


@dataclass(frozen=True)
class AudioChunk:
    """The next piece of a stream's audio, in order."""

    pcm: np.ndarray  # float32 [samples] at the voice's rate
    sentence_index: int  # which of the request's sentences it speaks
    words: Words = ()  # (word, start, end sample in the stream); on the first chunk of a sentence only


def chunk_outputs(chunk: AudioChunk) -> dict[str, np.ndarray]:
    """A chunk as the response tensors of `tts` and `tts_ar`."""
    outputs = {c.PCM: chunk.pcm.astype(np.float32, copy=False),
               c.SENTENCE_INDEX: np.array([chunk.sentence_index], dtype=np.int32)}
    if chunk.words:
        outputs[c.WORDS] = np.array([w.encode() for w, _, _ in chunk.words], dtype=object)
        outputs[c.WORD_SAMPLES] = np.array([(a, b) for _, a, b in chunk.words], dtype=np.int64)
    return outputs


async def ordered(
    calls: AsyncIterator[tuple[Any, Awaitable[T]]],
    depth: int,
    is_cancelled: Callable[[], bool],
) -> AsyncIterator[tuple[Any, T]]:
    """Run the awaitables of `calls`, at most `depth` not yet taken by the consumer,
    and yield ``(tag, result)`` in call order. `calls` is pulled only when there is
    room; once `is_cancelled()`, nothing more is started."""
    queue: asyncio.Queue = asyncio.Queue()
    room = asyncio.Semaphore(depth)

    async def start() -> None:
        try:
            async with aclosing(calls):
                while True:
                    await room.acquire()
                    if is_cancelled():
                        return
                    try:
                        tag, work = await anext(calls)
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
            room.release()
            yield tag, result
    finally:
        starter.cancel()
        while not queue.empty():
            item = queue.get_nowait()
            if item is not None and isinstance(item[1], asyncio.Future):
                item[1].cancel()
