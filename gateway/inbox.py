"""A context's inbox: sentences waiting for synthesis, and the flush and close marks
between them, in the order the client sent them."""

from __future__ import annotations

import asyncio
import enum
from collections import deque


class Mark(enum.Enum):
    FLUSH = "flush"  # deliver every sample so far; the context goes on
    CLOSE = "close"  # deliver every sample so far; the context ends


class Inbox:
    """Sentences and marks for one worker.

    `take` hands the worker a batch of whole sentences of at most `max_chars` (one
    longer sentence goes alone), so the synthesis it starts is bounded: a worker that
    stops taking, because its client reads slowly, stops synthesis for that context.
    """

    def __init__(self) -> None:
        self._items: deque[str | Mark] = deque()
        self._ready = asyncio.Event()
        self.chars = 0  # characters of the sentences waiting

    def __len__(self) -> int:
        return len(self._items)

    def put(self, *items: str | Mark) -> None:
        for item in items:
            self._items.append(item)
            if isinstance(item, str):
                self.chars += len(item)
        self._ready.set()

    async def take(self, max_chars: int) -> list[str] | Mark:
        """The next mark, or the next batch of sentences."""
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        if isinstance(self._items[0], Mark):
            return self._items.popleft()
        batch: list[str] = []
        size = 0
        while self._items and isinstance(self._items[0], str) and (not batch or size + len(self._items[0]) <= max_chars):
            sentence = self._items.popleft()
            batch.append(sentence)
            size += len(sentence)
        self.chars -= size
        return batch
