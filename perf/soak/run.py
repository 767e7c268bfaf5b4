"""One soak against servers already started: the calibration, the listeners' load (with
faults under --chaos), then what the servers hold or leave; the results as a dict."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime

from contract.models import TTS_ACTIVE_METRIC
from operations.loopback import Servers, triton_metrics
from perf.soak.calibration import calibrate
from perf.soak.chaos import Fault
from perf.soak.faults import beside_the_load
from perf.soak.listener import run_listeners
from perf.soak.monitor import Sample, growth, log_errors, monitor, settle, shm_entries, shm_leaks
from perf.soak.summary import heard
from perf.soak.tally import Tally


async def soak(args: argparse.Namespace, servers: Servers) -> dict:
    shm_before = shm_entries()
    logs_before = {name: path.stat().st_size for name, path in servers.logs.items()}
    if TTS_ACTIVE_METRIC not in await asyncio.to_thread(triton_metrics, servers.metrics_port):
        print(f"warning: Triton exports no {TTS_ACTIVE_METRIC}; leaked tts requests cannot be counted")
    calibration_s = 0.0 if args.clients else min(25.0, 0.2 * args.duration)
    capacity = None
    if not args.clients:
        capacity = await calibrate(servers.url, calibration_s, args.calibration_streams, random.Random(args.seed))
    listeners = args.clients or max(1, round(capacity / 2))
    soak_s = args.duration - calibration_s
    warmup_s = min(0.2 * soak_s, 60.0)
    print(f"capacity: {'not measured' if capacity is None else f'{capacity:.1f} audio-s/s'}; "
          f"{listeners} listeners for {soak_s:.0f} s (warm-up {warmup_s:.0f} s)", flush=True)
    tally, faults, samples = await load(args, servers, listeners, soak_s)
    after = await settle(servers.metrics_port)
    leaked_shm, others_shm = shm_leaks(shm_before)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(),
        "command": "python -m perf.soak " + " ".join(sys.argv[1:]),
        "seed": args.seed, "duration_s": args.duration, "calibration_s": calibration_s,
        "soak_s": soak_s, "warmup_s": round(warmup_s, 1),
        "capacity_audio_s_per_s": None if capacity is None else round(capacity, 2), "listeners": listeners,
        **heard(tally, faults, args),
        "leaked_tts_requests": after["active"], "pending_requests": after["pending"],
        "leaked_shm_segments": len(leaked_shm), "leaked_shm_names": leaked_shm,
        "semaphores_left_in_shm": others_shm,
        "gateway_rss": growth(samples, 1, warmup_s, soak_s), "triton_rss": growth(samples, 2, warmup_s, soak_s),
        "peak_active_tts_requests": max((s[3] for s in samples if s[3] is not None), default=None),
        "server_log_errors": {name: log_errors(path, logs_before[name]) for name, path in servers.logs.items()},
        "logs": {name: str(path) for name, path in servers.logs.items()},
        "host_load": {"median": statistics.median(s[4] for s in samples), "max": max(s[4] for s in samples)},
        "samples": samples,  # (s since soak start, gateway RSS, Triton tree RSS, active tts requests, 1-min load)
    }


async def load(args: argparse.Namespace, servers: Servers, listeners: int,
               soak_s: float) -> tuple[Tally, list[Fault], list[Sample]]:
    """`listeners` for `soak_s` while the servers are sampled and, under --chaos, faults strike."""
    samples: list[Sample] = []
    sampler = asyncio.create_task(monitor(servers, time.monotonic(), samples))
    tally = Tally()
    chaos = (beside_the_load(servers, args.chaos, args.fault_every, soak_s, tally.start) if args.chaos
             else contextlib.nullcontext([]))
    async with chaos as faults:
        await run_listeners(servers.url, listeners, soak_s, args, tally)
        if sampler.done():  # it samples until cancelled: it failed, and its figures would be stale
            raise RuntimeError("the memory monitor stopped") from sampler.exception()
        sampler.cancel()
    return tally, faults, samples
