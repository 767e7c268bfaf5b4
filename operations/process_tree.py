"""Triton's processes, read from /proc: whether one is alive, its session, the model a
Python backend stub runs; and killing what is left of them."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable
from pathlib import Path

import psutil


@functools.lru_cache(maxsize=1024)
def model_of(process: psutil.Process) -> str | None:
    """The model a stub runs, from its command line (the model's `NAME/1/model.py`), read
    once: a dead stub's can no longer be read."""
    with contextlib.suppress(psutil.Error):
        for arg in process.cmdline():
            if arg.endswith("/1/model.py"):
                return Path(arg).parent.parent.name
    return None


def session_of(process: psutil.Process) -> int | None:
    """The process's session id (a launched Triton's is its pid), None once it is gone."""
    try:
        return os.getsid(process.pid)
    except OSError:  # gone meanwhile
        return None


def name_of(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return "(gone)"


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stub_of(processes: Iterable[psutil.Process], model: str) -> psutil.Process:
    """The live Python backend stub among `processes` that runs `model`."""
    for process in processes:
        if alive(process) and model_of(process) == model:
            return process
    raise LookupError(f"no stub runs {model}")


def kill_all(processes: Iterable[psutil.Process], wait: bool = True) -> None:
    """Kill `processes` (one may die meanwhile); with `wait`, wait up to 10 s for them to
    be gone. Without it, a live parent reaps them when it will: tritonserver reaps its
    stubs late, and a supervisor waiting on that saw no other fault meanwhile."""
    processes = list(processes)
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    if wait:
        psutil.wait_procs(processes, timeout=10)


def kill_session(session: int) -> list[str]:
    """Kill every process left in `session`; "PID NAME" of each."""
    left = [p for p in psutil.process_iter() if session_of(p) == session]
    kill_all(left)
    return [f"{p.pid} {name_of(p)}" for p in left]
