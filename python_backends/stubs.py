"""The Python backend stubs of this stub's tritonserver, read from /proc: which model each
runs, and whether one died or stopped lately. Triton 2.51 tells a call held by a dead or
stopped stub only at its next health check, about a second later; /proc tells at once, so
that a stateless call held there can be issued again sooner (failover.Failover). No
Triton: imported by bls.Bls, tested against a fake /proc."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

# A stub found dead or stopped counts against its model this long: past the supervisor's
# reload of the model, after which Triton gives the dead stub no more calls.
LATELY_S = 30.0
# How often, at most, the live stubs are read for their models: a dead stub's command line
# can no longer be read, so its model must be known from before it died.
LEARN_EVERY_S = 2.0
FAULT_STATES = frozenset("ZTtX")  # zombie, stopped, traced, dead

Child = tuple[str, list[str]]  # (state letter, command line)


def children(parent: int, proc: Path = Path("/proc")) -> dict[int, Child]:
    """The processes whose parent is `parent`, by pid: their state and command line (a
    zombie's is empty)."""
    found = {}
    for entry in proc.glob("[0-9]*"):
        try:
            state, ppid = _stat(entry)
            if ppid == parent:
                found[int(entry.name)] = (state, (entry / "cmdline").read_bytes().decode(errors="replace").split("\0"))
        except (OSError, ValueError):  # not a process, or gone meanwhile
            continue
    return found


def state_of(pid: int, proc: Path = Path("/proc")) -> str | None:
    """A process's state letter, None once it is gone (reaped)."""
    try:
        return _stat(proc / str(pid))[0]
    except (OSError, ValueError):
        return None


def _stat(entry: Path) -> tuple[str, int]:
    """A process's state and parent, from its stat (after its name, which may hold anything)."""
    state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
    return state, int(ppid)


def model_of(args: list[str]) -> str | None:
    """The model a stub runs: its command line names the model's `NAME/1/model.py`."""
    return next((Path(a).parent.parent.name for a in args if a.endswith("/1/model.py")), None)


class StubWatch:
    """Which of a tritonserver's stubs died or stopped lately, by model. `learn` (called
    often; it reads all of /proc every LEARN_EVERY_S at most) keeps the live stubs' models
    known; `faulty` reads the state of the model's stubs only, and is cheap."""

    def __init__(self, children: Callable[[], dict[int, Child]], state_of: Callable[[int], str | None] = state_of,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._children, self._state_of, self._now = children, state_of, now
        self._models: dict[int, str] = {}  # pid: the model it ran, learned while it lived
        self._faulted: dict[int, float] = {}  # pid: when it was first found dead or stopped
        self._learned_at = -math.inf

    def learn(self) -> None:
        now = self._now()
        if now - self._learned_at < LEARN_EVERY_S:
            return
        self._learned_at, found = now, self._children()
        for pid, (_, args) in found.items():
            if (model := model_of(args)) is not None:
                self._models[pid] = model
        for pid in [pid for pid in self._models if pid not in found]:  # reaped: dead too
            if now - self._faulted.setdefault(pid, now) >= LATELY_S:
                del self._models[pid], self._faulted[pid]  # long gone: forgotten, as its pid may come again

    def faulty(self, model: str) -> bool:
        """Whether a stub of `model` was found dead, stopped or gone in the last LATELY_S."""
        now = self._now()
        for pid in [pid for pid, of in self._models.items() if of == model]:
            if (state := self._state_of(pid)) is None or state in FAULT_STATES:
                self._faulted.setdefault(pid, now)
        return any(self._models.get(pid) == model and now - at < LATELY_S for pid, at in self._faulted.items())
