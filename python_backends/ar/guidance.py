"""Classifier-free guidance across a pair of Talker sequences (pure functions).

vLLM has no CFG: a guided stream is two requests, the conditional one (the text) and an
unconditional one (the same without it), and a logits processor combines their rows of
each step's logits, u + s·(c − u), and writes the result into both rows, so both sample
the same token and stay the same sequence. That holds only while both rows are in the
same step with the same number of tokens written; a row admitted one step late (vLLM's
scheduler admits requests as KV space frees) would be guided against the wrong step.
`plan` finds, for one batch, the pairs in lock-step and the pairs out of it, which the
Talker reports and ends rather than guide wrongly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

import numpy as np


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


def plan(rows: Iterable[Row]) -> Plan:
    """Which guided pairs of this batch can be combined, and which are out of step."""
    by_pair: dict[str, dict[Role, Row]] = {}
    for row in rows:
        by_pair.setdefault(row.pair, {})[row.role] = row
    pairs, broken = [], []
    for pair, members in by_pair.items():
        c, u = members.get(Role.CONDITIONAL), members.get(Role.UNCONDITIONAL)
        if c is None or u is None or c.written != u.written:
            broken.append(pair)
        else:
            pairs.append((c.index, u.index, c.scale))
    return Plan(tuple(pairs), tuple(broken))


def guide(conditional: np.ndarray, unconditional: np.ndarray, scale: float) -> np.ndarray:
    """u + s·(c − u); at scale 1 the conditional logits themselves, bit for bit."""
    if scale == 1:
        return conditional
    return unconditional + scale * (conditional - unconditional)


def apply(logits: np.ndarray, pairs: Iterable[tuple[int, int, float]]) -> None:
    """Write each pair's guided logits into both of its rows, in place."""
    for c, u, scale in pairs:
        logits[c] = logits[u] = guide(logits[c], logits[u], scale)
