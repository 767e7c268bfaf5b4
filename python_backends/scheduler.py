"""Stage calls of all streams, most urgent first.

A stage has a fixed number of instances. If every stream sent its calls as soon as it
could, a stream seconds ahead of its listener would queue in front of a new stream's
first chunk, or of one about to stall. So calls wait here instead, for a free slot
(one per instance), and the free slot goes to the call with the earliest deadline:
the time its stream's listener will need the audio. Triton 2.51's BLS cannot give a
request a priority, so the order is kept here rather than in Triton's queue.

Calls are not preempted, so a call far from its deadline (a sentence synthesized ahead)
that took the last free slot would hold it while a new stream's first chunk waits. So
such calls leave a slot free; a call due within URGENT_S may take any.

Pure asyncio, no Triton: the tts model owns one scheduler per stage.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from .contract import PLAYER_LEAD_S

T = TypeVar("T")

# A call due within this long is urgent: it may take the slots others leave free.
URGENT_S = 1.0


class DeadlineScheduler:
    """Runs calls on `slots` slots, earliest deadline first; ties go in arrival order.
    Calls not yet urgent leave one slot free, where there are several."""

    def __init__(self, slots: int, now: Callable[[], float] = time.monotonic) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, not {slots}")
        self.slots = slots
        self.reserve = min(1, slots - 1)
        self.busy = 0
        self._now = now
        self._waiting: list[tuple[float, int, asyncio.Future]] = []
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot."""
        return sum(not turn.done() for _, _, turn in self._waiting)

    async def run(self, deadline: float, work: Callable[[], Awaitable[T]]) -> T:
        """Wait for a slot, then run `work()` holding it. Once started, the work runs to
        its end and holds the slot until then even if the caller is cancelled: Triton
        cannot take back a request it was sent, so the instance stays busy anyway."""
        await self._acquire(deadline)
        try:
            task = asyncio.ensure_future(work())
        except BaseException:
            self._release()
            raise
        task.add_done_callback(lambda _: self._release())
        return await asyncio.shield(task)

    def _may_start(self, deadline: float) -> bool:
        urgent = deadline - self._now() <= URGENT_S
        return self.busy < (self.slots if urgent else self.slots - self.reserve)

    async def _acquire(self, deadline: float) -> None:
        self._hand_over()  # waiters that became urgent meanwhile go first
        if self._may_start(deadline):
            self.busy += 1
            return
        turn = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (deadline, next(self._arrivals), turn))
        try:
            await turn  # the slot is handed over with the result
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # handed a slot, then cancelled before using it
            raise

    def _release(self) -> None:
        self.busy -= 1
        self._hand_over()

    def _hand_over(self) -> None:
        """Give free slots to the earliest waiters that may start now."""
        while self._waiting:
            deadline, _, turn = self._waiting[0]
            if turn.done():  # cancelled while waiting
                heapq.heappop(self._waiting)
            elif self._may_start(deadline):
                heapq.heappop(self._waiting)
                self.busy += 1
                turn.set_result(None)
            else:
                return


@dataclass
class PlaybackClock:
    """When a stream's listener will need each of its samples.

    Playback starts PLAYER_LEAD_S after the first chunk is sent and runs in real time.
    Until then the stream counts as starting now, so a new stream is the most urgent.
    """

    rate: int
    started: float | None = None
    planned: int = 0  # samples whose synthesis is planned so far (a lower bound on what comes)
    now: Callable[[], float] = field(default=time.monotonic, repr=False)

    def start(self) -> None:
        if self.started is None:
            self.started = self.now() + PLAYER_LEAD_S

    def deadline(self, sample: int | None = None) -> float:
        """When sample `sample` (default: the first one not planned yet) will be played."""
        sample = self.planned if sample is None else sample
        start = self.started if self.started is not None else self.now() + PLAYER_LEAD_S
        return start + sample / self.rate
