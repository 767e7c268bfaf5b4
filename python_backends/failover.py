"""Calls to a stateless stage (the vocoder, Code2Wav), issued again when lost or late.

Such a call can be lost with its instance: a stub killed or stopped fails it, one hung
never answers. The stage being stateless and deterministic, the same window issued
again gives the same audio, so a lost window costs its stream a little time, not the
stream. Triton fails a killed or stopped stub's call only after about 1 s (its health
check), a stall the listener hears; so a call unanswered well past what calls take
lately is issued again beside it (hedged), and the first answer is taken. Pure asyncio,
no Triton: bls.Bls issues the calls through it.
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
# A call still unanswered this multiple of the p99 time per frame times its window's
# frames after it was issued, and at least HEDGE_FLOOR_S, is issued again beside it: a
# call slowed by a busy host is hedged rarely, and a lost one costs its listener about
# this, not Triton's 1 s. None until MIN_CALLS have answered. One hedge at a time per
# stage: a host slowed at once (a burst) would otherwise hedge many calls, work it has no
# room for, while a lost instance loses one call at a time.
HEDGE_MULTIPLE = 2.0
HEDGE_FLOOR_S = 0.2


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
        return max(FLOOR_S, TIMEOUT_MULTIPLE * self._p99() * frames)

    def hedge_s(self, frames: int) -> float | None:
        """How long a call of `frames` goes unanswered before it is issued again beside it."""
        if len(self._per_frame) < MIN_CALLS:
            return None
        return max(HEDGE_FLOOR_S, HEDGE_MULTIPLE * self._p99() * frames)

    def _p99(self) -> float:
        times = sorted(self._per_frame)
        return times[min(len(times) - 1, int(0.99 * len(times)))]


class Failover:
    """Calls to one stateless stage, each issued again where it is lost (`issue` raises
    Lost, or passes its timeout) or late (unanswered past its hedge, while no other
    call's hedge is out), up to ATTEMPTS times in all; the first answer is taken. A call given up on is not taken back
    (Triton cannot), only no longer waited for: its late answer is dropped when it
    comes, and `late` counts those still out."""

    def __init__(self, attempts: int = ATTEMPTS, now: Callable[[], float] = time.monotonic) -> None:
        self.times = CallTimes()
        self.attempts = attempts
        self.late: set[asyncio.Future] = set()
        self.hedges: set[asyncio.Future] = set()  # attempts issued beside a late one, until they end
        self._now = now

    async def call(self, issue: Callable[[], Awaitable[T]], frames: int, retried: Callable[[Lost, int], None]) -> T:
        """`issue()`'s first answer, for a window of `frames`; `retried(why, attempt)` is
        told before each further attempt. The last attempt's Lost is raised, and any other
        error of an attempt at once."""
        flying: dict[asyncio.Future, float] = {}  # attempts in flight, by when each was issued
        issued, lost = 0, None
        try:
            while True:
                if issued < self.attempts and (not flying or self._hedge_due(flying, frames)):
                    hedge = bool(flying)
                    if issued:
                        retried(Lost(f"no answer after {self.times.hedge_s(frames):.2f} s") if hedge else lost,
                                issued + 1)
                    attempt = asyncio.ensure_future(issue())
                    flying[attempt] = self._now()
                    issued += 1
                    if hedge:
                        self.hedges.add(attempt)
                        attempt.add_done_callback(self.hedges.discard)
                if not flying:
                    raise lost
                done, _ = await asyncio.wait(flying, timeout=self._until_next(flying, frames, issued),
                                             return_when=asyncio.FIRST_COMPLETED)
                for call in done:
                    started = flying.pop(call)
                    try:
                        result = call.result()
                    except Lost as why:
                        lost = why
                        continue
                    self.times.record(frames, self._now() - started)
                    return result
                lost = self._give_up_late(flying, frames) or lost
        finally:
            for call in flying:  # the caller gave up, or another attempt answered: they still run
                self._drop_when_done(call)

    def _hedge_due(self, flying: dict[asyncio.Future, float], frames: int) -> bool:
        hedge_s = self.times.hedge_s(frames)
        return hedge_s is not None and not self.hedges and self._now() - max(flying.values()) >= hedge_s

    def _until_next(self, flying: dict[asyncio.Future, float], frames: int, issued: int) -> float:
        """Seconds until an attempt in flight passes its timeout, or the newest its hedge
        (while another call's hedge is out, its end is not awaited here: the attempts'
        timeouts bound the wait)."""
        due = [started + self.times.timeout_s(frames) for started in flying.values()]
        if issued < self.attempts and not self.hedges and (hedge_s := self.times.hedge_s(frames)) is not None:
            due.append(max(flying.values()) + hedge_s)
        return max(0.0, min(due) - self._now())

    def _give_up_late(self, flying: dict[asyncio.Future, float], frames: int) -> Lost | None:
        """Stop waiting for the attempts past their timeout; the Lost for them, if any."""
        timeout_s = self.times.timeout_s(frames)
        late = [call for call, started in flying.items() if self._now() - started >= timeout_s]
        for call in late:
            del flying[call]
            self._drop_when_done(call)
        return Lost(f"no answer within {timeout_s:.1f} s") if late else None

    def _drop_when_done(self, call: asyncio.Future) -> None:
        self.late.add(call)

        def dropped(done: asyncio.Future) -> None:
            self.late.discard(done)
            if not done.cancelled():
                done.exception()  # retrieved: a late failure is no one's to raise

        call.add_done_callback(dropped)
