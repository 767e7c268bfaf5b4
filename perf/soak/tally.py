"""What the listeners saw, all of them together: how utterances ended, what failed and
when, and their players' stalls, on the load's clock."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

COMPLETED, CANCELLED, ABORTED = "completed", "cancelled", "aborted"


@dataclass(frozen=True)
class Heard:
    """A stall of a listener's player, on the load's clock."""

    at_s: float  # since the load started
    seconds: float
    resumed: bool  # a `resuming` came during it: the gap a resume left


@dataclass(frozen=True)
class Failed:
    """An utterance that failed (an error, a hang, a dropped connection), on the load's clock."""

    kind: str
    spoken_at_s: float  # its `speak` sent
    at_s: float  # the failure
    audio: bool  # a frame of it had come
    resumed: bool  # a `resuming` had come


@dataclass
class Tally:
    """What the listeners saw, all of them together."""

    utterances: Counter = field(default_factory=Counter)  # by outcome
    errors: Counter = field(default_factory=Counter)  # by kind
    resumed: Counter = field(default_factory=Counter)  # utterances done after a `resuming`, by outcome
    failures: list[Failed] = field(default_factory=list)
    stalls: list[Heard] = field(default_factory=list)
    resume_bound_s: float | None = None  # the `resuming`s' within_ms, the longest
    audio_s: float = 0.0
    start: float = field(default_factory=time.monotonic)  # when the load started


class Failure(Exception):
    """An utterance went wrong in a way the server is to blame for."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind
        self.failed: Failed | None = None  # set by Listener.utterance
