"""Triton's processes, read from /proc: whether one is alive, its session, the model a
Python backend stub runs; and killing what is left of them."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from collections.abc import Iterable
from pathlib import Path

import psutil

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


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
    """Kill every process left alive in `session` (its zombies, init reaps once their
    parent is gone); "PID NAME" of each."""
    left = [p for p in psutil.process_iter() if session_of(p) == session and alive(p)]
    kill_all(left)
    return [f"{p.pid} {name_of(p)}" for p in left]


def adopt_orphans() -> None:
    """Make this process the reaper of its orphaned descendants: the stubs of a tritonserver
    that died or was killed, zombies among them (Triton reaps no stub that died holding a
    request), come to it rather than to init, which in a container may never reap them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def reap(processes: Iterable[psutil.Process]) -> None:
    """Reap those of `processes` that are this process's exited children (orphans it adopted)."""
    for process in processes:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(process.pid, os.WNOHANG)
