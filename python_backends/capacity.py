"""What a BLS model says of its server's capacity: how many real-time streams it
sustains, measured as it works. Both families measure it the same way (`CapacityMeter`),
and send it the same way, as the last response of every stream (`capacity_outputs`),
apart from the audio: the gateway admits streams by it. Sans I/O; `now` is injected.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from contract import models as c

# The capacity measured is that of about the last this many seconds of work.
CAPACITY_DECAY_S = 30.0


class CapacityMeter:
    """How many real-time streams `workers` sustain: `workers` times the audio made per
    second of a worker's time, over about the last CAPACITY_DECAY_S of work (older work
    decays exponentially). It follows what the cores really give, other processes and
    contention included.

    Work is told as how many calls or streams run (`running`); while n run, min(n,
    `workers`) workers are busy. Piper's stages: a worker per core, and calls in flight
    (one more may run than there are cores, to cover the others' hops). A batched engine
    such as the Talker's: one worker, busy while any stream is open, whose speed grows
    with its batch, so the estimate is what the batch sizes seen so far gave, a floor of
    what larger batches would."""

    def __init__(self, workers: int, now: Callable[[], float] = time.monotonic) -> None:
        self.workers, self._now = workers, now
        self._busy_s = self._audio_s = 0.0
        self._at = now()
        self._running = 0

    def running(self, count: int) -> None:
        """`count` calls or streams run from now on."""
        self._decay()
        self._running = count

    def made(self, audio_s: float) -> None:
        """This much audio was delivered."""
        self._decay()
        self._audio_s += audio_s

    @property
    def capacity(self) -> float:
        """Real-time streams sustained; 0 until some work was measured."""
        self._decay()
        return self.workers * self._audio_s / self._busy_s if self._busy_s > 0 else 0.0

    def _decay(self) -> None:
        now = self._now()
        factor = math.exp(-(now - self._at) / CAPACITY_DECAY_S)
        self._busy_s, self._audio_s = self._busy_s * factor, self._audio_s * factor
        self._busy_s += min(self._running, self.workers) * (now - self._at)  # recent: not decayed
        self._at = now


def capacity_outputs(capacity: float) -> dict[str, np.ndarray]:
    """The response that tells the gateway the capacity (0: not measured yet)."""
    return {c.CAPACITY: np.array([capacity], dtype=np.float32)}
