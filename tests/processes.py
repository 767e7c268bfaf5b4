"""What the tests (and perf's soak) read from /proc to check the servers: the shared
memory a process maps by name, and the stub among a server's processes that runs a model."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import psutil

from operations.process_tree import model_of


def shm_mapped_by(pids: Iterable[int]) -> set[str]:
    """The /dev/shm names these processes map."""
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:  # gone, or not ours to read
            continue
        names.update(line.split("/dev/shm/", 1)[1].split(" ")[0] for line in maps.splitlines() if "/dev/shm/" in line)
    return names


def stub_running(processes: list[psutil.Process], model: str) -> psutil.Process:
    """The stub among `processes` that runs `model` (a killed one may linger as a zombie)."""
    for process in processes:
        if model_of(process) == model:
            return process
    raise LookupError(f"no stub runs {model}")
