"""Calls to a stateless stage (the vocoder, Code2Wav), issued again when lost.

Such a call can be lost with its instance: a stub killed or stopped fails it, one hung
never answers. The stage being stateless and deterministic, the same window issued
again gives the same audio, so a lost window costs its stream a little time, not the
stream. Pure asyncio, no Triton: bls.Bls issues the calls through it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# A stateless call is issued at most this many times in all before its stream fails.
ATTEMPTS = 3
# A call's timeout: this multiple of the p99 time per frame of the calls that answered
# lately (CALL_HISTORY of them), times its window's frames, and at least FLOOR_S; COLD_S
# until MIN_CALLS have answered. A stub stopped or killed fails its call after about 1 s
# (Triton's health check), so the timeout only catches a stub that hangs while Triton
# still finds it healthy: it must not take a call slowed by a busy host for a lost one.
TIMEOUT_MULTIPLE = 4.0
FLOOR_S = 2.0
COLD_S = 10.0
MIN_CALLS = 20
CALL_HISTORY = 256


class Lost(Exception):
    """A stateless call whose answer will not come, or not in time: its instance's stub
    died or stopped, or it passed its timeout. Issued again, it may find another."""


class CallTimes:
    """How long a stage's calls take lately, per frame of their windows: the timeout a
    call of a given size gets before it counts as lost."""

    def __init__(self) -> None:
        self._per_frame: deque[float] = deque(maxlen=CALL_HISTORY)

    def record(self, frames: int, seconds: float) -> None:
        self._per_frame.append(seconds / max(1, frames))

    def timeout_s(self, frames: int) -> float:
        if len(self._per_frame) < MIN_CALLS:
            return COLD_S
        times = sorted(self._per_frame)
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        return max(FLOOR_S, TIMEOUT_MULTIPLE * p99 * frames)


class Failover:
    """Calls to one stateless stage, each issued again where it is lost (`issue` raises
    Lost, or passes its timeout), up to ATTEMPTS times in all. A call that passed its
    timeout is not taken back (Triton cannot), only no longer waited for: its late
    answer is dropped when it comes, and `late` counts those still out."""

    def __init__(self, attempts: int = ATTEMPTS, now: Callable[[], float] = time.monotonic) -> None:
        self.times = CallTimes()
        self.attempts = attempts
        self.late: set[asyncio.Future] = set()
        self._now = now

    async def call(self, issue: Callable[[], Awaitable[T]], frames: int, retried: Callable[[Lost, int], None]) -> T:
        """`issue()`'s result, for a window of `frames`; `retried(why, attempt)` is told
        before each further attempt. The last attempt's Lost is raised."""
        for attempt in range(2, self.attempts + 1):
            try:
                return await self._within_timeout(issue, frames)
            except Lost as lost:
                retried(lost, attempt)
        return await self._within_timeout(issue, frames)

    async def _within_timeout(self, issue: Callable[[], Awaitable[T]], frames: int) -> T:
        timeout_s = self.times.timeout_s(frames)
        started = self._now()
        call = asyncio.ensure_future(issue())
        try:
            done, _ = await asyncio.wait({call}, timeout=timeout_s)
        except asyncio.CancelledError:
            self._drop_when_done(call)  # the caller gave up; the call still runs
            raise
        if not done:
            self._drop_when_done(call)
            raise Lost(f"no answer within {timeout_s:.1f} s")
        result = call.result()
        self.times.record(frames, self._now() - started)
        return result

    def _drop_when_done(self, call: asyncio.Future) -> None:
        self.late.add(call)

        def dropped(done: asyncio.Future) -> None:
            self.late.discard(done)
            if not done.cancelled():
                done.exception()  # retrieved: a late failure is no one's to raise

        call.add_done_callback(dropped)
