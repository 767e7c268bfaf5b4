"""What the tests (and perf's soak) read from /proc to check the servers: the shared
memory a process maps by name, the vLLM engine processes under a model's stub."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from operations.triton_process import TritonProcess


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


def vllm_engines(server: TritonProcess, model: str) -> list[str]:
    """The vLLM processes under `model`'s stub, by their titles ("VLLM::EngineCore")."""
    titles = [" ".join(p.cmdline()).strip() for p in server.stub(model).children(recursive=True)]
    return sorted(title for title in titles if title.startswith("VLLM::"))
