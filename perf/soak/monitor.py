"""The servers watched from outside: their memory, the tts gauge and the host's load
sampled during the load; what they hold or leave after it (requests, shared memory, log
errors)."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path

import psutil

from contract.models import TTS_ACTIVE_METRIC
from operations.loopback import Servers, triton_metrics
from operations.shared_memory import SHM
from tests.processes import shm_mapped_by

PENDING_METRIC = "nv_inference_pending_request_count"
SETTLE_S = 20.0  # after the load, the server must return to idle within this
SAMPLE_S = 2.0  # memory sampling interval
RSS_WINDOW_S = 10.0  # RSS is the median of the samples in a window this long


def rss(processes: list[psutil.Process]) -> int:
    total = 0
    for proc in processes:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


Sample = tuple[float, int, int, float | None, float]  # s since soak start, gateway RSS, Triton RSS, active tts, load


async def monitor(servers: Servers, start: float, samples: list[Sample]) -> None:
    """Append a Sample every SAMPLE_S; the gauge too, to show it moves under load."""
    gateway = psutil.Process(servers.gateway.pid)
    while True:
        try:
            active = (await asyncio.to_thread(triton_metrics, servers.metrics_port)).get(TTS_ACTIVE_METRIC)
        except OSError:  # Triton restarting (--chaos)
            active = None
        triton = servers.triton_tree()
        if triton:  # not while Triton is gone (--chaos)
            samples.append((round(time.monotonic() - start, 1), rss([gateway]), rss(triton), active,
                            os.getloadavg()[0]))  # the host is shared: what else ran shows in its load
        await asyncio.sleep(SAMPLE_S)


def window_median(samples: list[Sample], column: int, start: float) -> float:
    """Median over [start, start + RSS_WINDOW_S): one sample catches transient buffers."""
    values = [s[column] for s in samples if start <= s[0] < start + RSS_WINDOW_S]
    return statistics.median(values or [samples[-1][column]])


def growth(samples: list[Sample], column: int, warmup_s: float, soak_s: float) -> dict[str, float]:
    """RSS after warm-up and at the end of the load (MiB), and the growth between them (%)."""
    start = window_median(samples, column, warmup_s)
    end = window_median(samples, column, max(warmup_s, soak_s - RSS_WINDOW_S))
    return {"after_warmup_mib": round(start / 2**20, 1), "end_mib": round(end / 2**20, 1),
            "growth_pct": round((end - start) * 100 / start, 2)}


def shm_entries() -> set[str]:
    return {entry.name for entry in SHM.iterdir()}


def shm_leaks(before: set[str]) -> tuple[list[str], list[str]]:
    """Entries new since `before` that no process maps: left by a process that is gone
    (the live Triton's are not leaks; what it leaves at its stop is counted then). Apart:
    POSIX semaphores (sem.*), which the Piper family's stubs never make but vLLM's engines
    (the AR family, in other tests on a shared host) do."""
    left = sorted(shm_entries() - before - shm_mapped_by(psutil.pids()))
    return [n for n in left if not n.startswith("sem.")], [n for n in left if n.startswith("sem.")]


async def settle(metrics_port: int) -> dict[str, float | None]:
    """Poll until Triton holds no tts or pending requests, or SETTLE_S passes; the last values."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        m = await asyncio.to_thread(triton_metrics, metrics_port)
        active, pending = m.get(TTS_ACTIVE_METRIC), m.get(PENDING_METRIC, 0.0)
        if (not active and not pending) or time.monotonic() > deadline:
            return {"active": active, "pending": pending}
        await asyncio.sleep(0.5)


def log_errors(path: Path, offset: int) -> int:
    """Error lines after `offset` (start-up warns of the missing GPU): Python's ' ERROR ' and
    tracebacks, glog's 'E0123 '."""
    with path.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    return sum(" ERROR " in line or line.startswith("Traceback") or (line[:1] == "E" and line[1:5].isdigit()) for line in lines)
