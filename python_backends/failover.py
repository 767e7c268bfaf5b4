"""Calls to a stateless stage (the vocoder, Code2Wav), issued again when lost.

Such a call can be lost with its instance: a stub killed or stopped fails it, one hung
never answers. The stage being stateless and deterministic, the same window issued
again gives the same audio, so a lost window costs its stream a little time, not the
stream. Pure asyncio, no Triton: bls.Bls issues the calls through it.

Triton fails a call held by a dead or stopped stub only at its next health check, about
a second later, which a stream that has just started cannot spare. So an attempt is
judged sooner too: once it is slower than the calls lately (its suspect time), it is
taken for lost if a stub of its stage died or stopped lately (`faulty`, from /proc), and
issued again. Triton may give it to the same instance again, so every attempt but the
last is judged so.
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
# An attempt's suspect time: SUSPECT_MULTIPLE times the p99 time per frame of the calls
# lately, times its window's frames, at least SUSPECT_FLOOR_S (SUSPECT_COLD_S until
# MIN_CALLS have answered). The last attempt is not judged so, so that a stage slowed by a
# busy host just after a fault loses no stream, at worst issuing its calls again.
SUSPECT_MULTIPLE = 2.0
SUSPECT_FLOOR_S = 0.1
SUSPECT_COLD_S = 0.5
RECHECK_S = 0.05  # past its suspect time, how often an attempt asks whether its stage is faulty
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
        return self._within(frames, TIMEOUT_MULTIPLE, FLOOR_S, COLD_S)

    def suspect_s(self, frames: int) -> float:
        """How long an attempt runs before a faulty stage's stub is suspected."""
        return self._within(frames, SUSPECT_MULTIPLE, SUSPECT_FLOOR_S, SUSPECT_COLD_S)

    def _within(self, frames: int, multiple: float, floor_s: float, cold_s: float) -> float:
        if len(self._per_frame) < MIN_CALLS:
            return cold_s
        times = sorted(self._per_frame)
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        return max(floor_s, multiple * p99 * frames)


class Failover:
    """Calls to one stateless stage, each issued again where it is lost (`issue` raises
    Lost, or passes its timeout, or an attempt but the last passes its suspect time while
    the stage is `faulty()`), up to ATTEMPTS times in all. A call given up on is not taken
    back (Triton cannot), only no longer waited for: its late answer is dropped when it
    comes, and `late` counts those still out."""

    def __init__(self, attempts: int = ATTEMPTS, faulty: Callable[[], bool] = lambda: False,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.times = CallTimes()
        self.attempts = attempts
        self.late: set[asyncio.Future] = set()
        self._faulty, self._now = faulty, now

    async def call(self, issue: Callable[[], Awaitable[T]], frames: int, retried: Callable[[Lost, int], None]) -> T:
        """`issue()`'s result, for a window of `frames`; `retried(why, attempt)` is told
        before each further attempt. The last attempt's Lost is raised."""
        attempt = 1
        while True:
            try:
                return await self._within_timeout(issue, frames, suspect=attempt < self.attempts)
            except Lost as lost:
                if attempt == self.attempts:
                    raise
                attempt += 1
                retried(lost, attempt)

    async def _within_timeout(self, issue: Callable[[], Awaitable[T]], frames: int, suspect: bool) -> T:
        """`issue()`'s result, if it comes within its timeout, and (if `suspect`) before
        the stage is found faulty past its suspect time (checked every RECHECK_S)."""
        timeout_s, suspect_s = self.times.timeout_s(frames), self.times.suspect_s(frames)
        started = self._now()
        call = asyncio.ensure_future(issue())
        wait_s = min(suspect_s, timeout_s) if suspect else timeout_s
        try:
            while not (await asyncio.wait({call}, timeout=wait_s))[0]:
                if (left_s := started + timeout_s - self._now()) <= 0:
                    raise Lost(f"no answer within {timeout_s:.1f} s")
                if suspect and self._faulty():
                    raise Lost(f"no answer within {suspect_s:.1f} s, a stub of the stage lately dead or stopped")
                wait_s = min(RECHECK_S, left_s) if suspect else left_s
        except (asyncio.CancelledError, Lost):
            self._drop_when_done(call)  # given up on (or the caller gave up); the call still runs
            raise
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
