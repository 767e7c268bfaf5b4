"""Objects held for a while after their last use, so that Python, not another thread,
frees them (bls.Bls holds Triton's finished response iterators so). Pure: no pb_utils."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable


class KeepAlive:
    """References to objects whose use has ended, each dropped `hold_s` after it came."""

    def __init__(self, hold_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.hold_s = hold_s
        self._clock = clock
        self._held: collections.deque[tuple[float, object]] = collections.deque()

    def keep(self, item: object) -> None:
        """Hold `item` for `hold_s`; drop what has been held longer."""
        now = self._clock()
        self._held.append((now, item))
        while now - self._held[0][0] > self.hold_s:
            self._held.popleft()

    def __len__(self) -> int:
        return len(self._held)
