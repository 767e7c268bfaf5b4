"""Triton's shared memory in /dev/shm: the region each Python backend stub maps, what was
made since a server started, and removing what no live process maps any more (a killed
stub's region, vLLM's shared memory and semaphores)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

import psutil

SHM = Path("/dev/shm")
SHM_PREFIX = "triton_python_backend_shm_region_"  # each Python backend stub's region


def stub_regions(stubs: list[psutil.Process]) -> list[Path]:
    """The shared memory region each stub was started with (named on its command line)."""
    regions = []
    for stub in stubs:
        try:
            regions += [SHM / arg for arg in stub.cmdline() if arg.startswith(SHM_PREFIX)]
        except psutil.Error:  # gone meanwhile
            continue
    return regions


def made_since(started_at: float) -> list[Path]:
    """The /dev/shm files made since `started_at` (a time.time())."""
    made = []
    for path in SHM.iterdir():
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            if path.stat().st_mtime >= started_at:
                made.append(path)
    return made


def shm_inodes_mapped() -> set[int]:
    """The inodes of the /dev/shm files that some process maps. By inode, not name: a
    POSIX semaphore (multiprocessing's `sem.mp-*`, which vLLM's processes open by name)
    is mapped under the temporary name it was made with, so its own name is never seen
    mapped, and removing it would break another server starting beside this one."""
    inodes = set()
    for pid in psutil.pids():
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:  # gone, or not ours to read
            continue
        inodes.update(int(line.split()[4]) for line in maps.splitlines() if "/dev/shm/" in line)
    return inodes


def remove_unmapped(paths: Iterable[Path]) -> int:
    """Remove those of `paths` (in /dev/shm) that no process maps; returns how many."""
    in_use, removed = shm_inodes_mapped(), 0
    for path in paths:
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            if path.stat().st_ino not in in_use:
                path.unlink()
                removed += 1
    return removed


def remove_stale_regions() -> int:
    """Remove the Python backend's shared memory regions that no process uses: those of
    a Triton that crashed or was killed. Returns how many."""
    return remove_unmapped(SHM.glob(SHM_PREFIX + "*"))
