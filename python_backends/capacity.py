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
CAPACITY_WINDOW_S = 30.0


class CapacityMeter:
    """How many real-time streams `slots` workers sustain: `slots` times the audio made
    per second a worker was busy, over about the last CAPACITY_WINDOW_S of work (older
    work decays exponentially). It follows what the cores really give, other processes
    and contention included.

    Work is counted as calls that held a slot (`worked`, Piper's stages: one call per
    core at a time), or as the time any stream was open (`busy`, a batched engine such
    as the Talker's: one slot whose speed grows with its batch, so the estimate is what
    the batch sizes seen so far gave, a floor of what larger batches would)."""

    def __init__(self, slots: int, now: Callable[[], float] = time.monotonic) -> None:
        self.slots, self._now = slots, now
        self._busy_s = self._audio_s = 0.0
        self._at = now()
        self._open = 0  # streams open now, while counted by `busy`

    def worked(self, seconds: float) -> None:
        """A call held a slot this long."""
        self._decay()
        self._busy_s += seconds

    def made(self, audio_s: float) -> None:
        """This much audio was delivered."""
        self._decay()
        self._audio_s += audio_s

    def opened(self) -> None:
        """A stream started: the time until the last one ends counts as busy."""
        self._decay()
        self._open += 1

    def closed(self) -> None:
        self._decay()
        self._open -= 1

    @property
    def streams(self) -> float:
        """Real-time streams sustained; 0 until some work was measured."""
        self._decay()
        return self.slots * self._audio_s / self._busy_s if self._busy_s > 0 else 0.0

    def _decay(self) -> None:
        now = self._now()
        factor = math.exp(-(now - self._at) / CAPACITY_WINDOW_S)
        self._busy_s, self._audio_s = self._busy_s * factor, self._audio_s * factor
        if self._open:  # the time since the last call was busy, and is recent
            self._busy_s += now - self._at
        self._at = now


def capacity_outputs(streams: float) -> dict[str, np.ndarray]:
    """The response that tells the gateway the capacity (0: not measured yet)."""
    return {c.CAPACITY: np.array([streams], dtype=np.float32)}
