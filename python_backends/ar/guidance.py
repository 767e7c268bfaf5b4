"""Classifier-free guidance across a pair of Talker sequences (pure functions).

vLLM has no CFG: a guided stream is two requests, the conditional one (the text) and an
unconditional one (the same without it), and a logits processor combines their rows of
each step's logits, u + s·(c − u), and writes the result into both rows; with the same
seed both sample the same token and stay the same sequence. That holds only while both
rows are in the same step with the same number of tokens written:

- `PairGate` (for the Talker's scheduler) lets a pair into vLLM's waiting queue only once
  both requests have arrived and the batch has room for both, so they are admitted in
  the same step (a row admitted a step late would be guided against the wrong step);
- `plan` still finds, for each batch, the pairs out of step (a row preempted or lost),
  which the processor stops guiding, ending the unconditional row;
- `diverged_at` is the check the Talker makes of each pair's two token streams, and
  reports.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

import numpy as np

R = TypeVar("R", bound=Hashable)


class Role(Enum):
    CONDITIONAL = "conditional"
    UNCONDITIONAL = "unconditional"


@dataclass(frozen=True)
class Row:
    """One row of a step's logits that belongs to a guided pair."""

    index: int  # the row in the batch's logits
    pair: str  # the guided stream both rows serve
    role: Role
    written: int  # tokens this sequence has written so far
    scale: float  # the guidance scale the stream asked for


@dataclass(frozen=True)
class Plan:
    pairs: tuple[tuple[int, int, float], ...]  # (conditional row, unconditional row, scale), in lock-step
    out_of_step: tuple[str, ...]  # pairs with a row missing from this batch or a step behind
    to_end: tuple[int, ...] = ()  # the unconditional rows of those pairs, no use any more


def plan(rows: Iterable[Row]) -> Plan:
    """Which guided pairs of this batch can be combined, and which are out of step."""
    by_pair: dict[str, dict[Role, Row]] = {}
    for row in rows:
        by_pair.setdefault(row.pair, {})[row.role] = row
    pairs, broken, to_end = [], [], []
    for pair, members in by_pair.items():
        c, u = members.get(Role.CONDITIONAL), members.get(Role.UNCONDITIONAL)
        if c is None or u is None or c.written != u.written:
            broken.append(pair)
            to_end += [u.index] if u is not None else []
        else:
            pairs.append((c.index, u.index, c.scale))
    return Plan(tuple(pairs), tuple(broken), tuple(to_end))


@dataclass
class PairGate(Generic[R]):
    """Holds the requests of guided pairs until both have arrived, then lets them go
    together, and only when the batch has room for both."""

    _arrived: dict[str, R] = field(default_factory=dict)  # the first of a pair, waiting for the second
    _ready: deque[tuple[R, ...]] = field(default_factory=deque)  # whole pairs, in arrival order

    def arrive(self, pair: str, request: R) -> None:
        first = self._arrived.pop(pair, None)
        if first is None:
            self._arrived[pair] = request
        else:
            self._ready.append((first, request))

    def release(self, room: int) -> list[R]:
        """Whole pairs, oldest first, as many as `room` places in the batch hold."""
        released: list[R] = []
        while self._ready and len(released) + len(self._ready[0]) <= room:
            released += self._ready.popleft()
        return released

    def forget(self, requests: Iterable[R]) -> None:
        """Drop requests that ended while held (aborted); a partner left alone goes on alone."""
        gone = set(requests)
        self._arrived = {pair: r for pair, r in self._arrived.items() if r not in gone}
        self._ready = deque(kept for pair in self._ready if (kept := tuple(r for r in pair if r not in gone)))


def diverged_at(conditional: Sequence[int], unconditional: Sequence[int]) -> int | None:
    """The first token at which a pair's sequences differ (one ending early counts), or
    None: in lock-step throughout, so every token was guided."""
    for i, (a, b) in enumerate(zip(conditional, unconditional)):
        if a != b:
            return i
    return None if len(conditional) == len(unconditional) else min(len(conditional), len(unconditional))


def guide(conditional: np.ndarray, unconditional: np.ndarray, scale: float) -> np.ndarray:
    """u + s·(c − u); at scale 1 the conditional logits themselves, bit for bit."""
    if scale == 1:
        return conditional
    return unconditional + scale * (conditional - unconditional)


def apply(logits: np.ndarray, pairs: Iterable[tuple[int, int, float]]) -> None:
    """Write each pair's guided logits into both of its rows, in place (numpy or torch)."""
    for c, u, scale in pairs:
        logits[c] = logits[u] = guide(logits[c], logits[u], scale)
