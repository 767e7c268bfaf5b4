"""Admission's rules that need no I/O: the room past the admitted load that streams
ahead of their listeners leave (`keeping_ahead`), and the admission queue: streams that
asked to wait for capacity rather than be refused `server_busy`, in order, each told its
position as it moves.

The gateway `pump`s the queue whenever it may admit (a timer): every waiter that would be
admitted now, in queue order, leaves with its `admitted` callback; the others hear
their new positions. A waiter that gives up (cancelled, disconnected) `leave`s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass


def keeping_ahead(leads: Iterable[float], open_streams: float, capacity: float, slack_s: float, peak: float) -> bool:
    """Whether one more stream may open past the admitted load (--admission-load of
    `capacity`): every stream being spoken is at least `slack_s` of audio ahead of its
    listener (`leads`), and the streams open stay within `peak` times the capacity.

    Listeners arriving at random at 0.75 of capacity go past 0.9 of it now and then, for
    seconds (a Poisson count's spread); streams that are seconds ahead ride that out, so
    refusing there turns users away from a server that keeps up. Streams that start
    together are each at their first audio's deadline (lead 0): they get no such room."""
    return slack_s > 0 and open_streams + 1 <= peak * capacity and min(leads, default=math.inf) >= slack_s


@dataclass(eq=False)
class Waiter:
    key: Hashable  # what `leave` names it by
    client: str  # whose admission is checked
    admitted: Callable[[], None]  # its turn came: it is counted among the open streams from now
    moved: Callable[[int], None]  # its new position, 1 first
    position: int = 0  # the position it was last told


class AdmissionQueue:
    """At most `size` waiters, first come first served among those admissible."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._waiters: list[Waiter] = []

    def __len__(self) -> int:
        return len(self._waiters)

    def join(self, waiter: Waiter) -> int | None:
        """The waiter's position, or None when the queue is full."""
        if len(self._waiters) >= self.size:
            return None
        self._waiters.append(waiter)
        waiter.position = len(self._waiters)
        return waiter.position

    def leave(self, key: Hashable) -> None:
        """The waiter named `key` gives up; those behind it move up."""
        self._waiters = [w for w in self._waiters if w.key != key]
        self._renumber()

    def pump(self, admissible: Callable[[str], bool]) -> int:
        """Admit, in order, every waiter whose client is `admissible` now (asked again
        after each admission, which changes the load); the others move up. Returns how
        many were admitted."""
        admitted = 0
        for waiter in list(self._waiters):
            if admissible(waiter.client):
                self._waiters.remove(waiter)
                waiter.admitted()
                admitted += 1
        self._renumber()
        return admitted

    def _renumber(self) -> None:
        for position, waiter in enumerate(self._waiters, 1):
            if waiter.position != position:
                waiter.position = position
                waiter.moved(position)
