"""PredGen's verification rule, pure: how much of a draft reply survives a new prompt.

A draft was written for an earlier (partial) question. One forward pass of the new
prompt followed by the draft gives, at each draft position, the tokens the model ranks
best there. The draft is kept up to its first token outside the best `k` (k = 1:
greedy, the argmax alone, which makes speculation lossless); at that position the
model's own best token replaces it, and the reply goes on from there. A draft kept
whole is followed by the token the model writes after it, unless it ended the reply.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple


class Verdict(NamedTuple):
    accepted: int  # how many of the draft's tokens are kept
    next_token: int | None  # the token that follows them: the correction, or the one after
    # the whole draft; None when the kept draft ends the reply


def verify(draft: Sequence[int], best: Sequence[Sequence[int]], k: int, after: int,
           ends: Collection[int] = ()) -> Verdict:
    """`best[i]`: the tokens ranked best at draft position i, best first (at least k of
    them, or all the model has); `after`: the model's best token after the whole draft;
    `ends`: the tokens that end a reply (what a draft holds after one never counts)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    if len(best) != len(draft):
        raise ValueError(f"{len(best)} rankings for a draft of {len(draft)} tokens")
    for i, (token, ranked) in enumerate(zip(draft, best)):
        if token not in ranked[:k]:
            return Verdict(i, ranked[0])
        if token in ends:
            return Verdict(i + 1, None)
    return Verdict(len(draft), after)
