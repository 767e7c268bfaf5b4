"""The benchmark's levels on one system: clients at each concurrency level, then
listeners at multiples of the capacity C, started together or arriving as a Poisson
process; each level a row of figures with the servers' CPU meanwhile."""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import time
from collections.abc import Awaitable, Callable

import psutil

from perf.speech.clients import poisson_arrivals, run_arrivals, run_level
from perf.speech.sampling import cpu_now, cpu_use, server_times, stage_cpu
from perf.speech.systems import System, log
from perf.tools.metrics import Stream, summarize
from perf.tools.workloads import workload


async def measure(system: System, name: str, level: int, rounds: int, listen: bool, seconds: float) -> dict:
    """One row: `level` clients speaking workload `name` `rounds` times each (fewer past `seconds`)."""
    row = await measure_streams(system, name, level, lambda: run_level(system.connect, workload(name), level, rounds,
                                                                       listen, seconds))
    return row | {"rounds_max": rounds}


async def measure_streams(system: System, name: str, level: int, speak: Callable[[], Awaitable[list[Stream]]]) -> dict:
    """One row: the streams `speak` runs, with the server's CPU and metrics meanwhile."""
    groups = system.groups() | {"client": [psutil.Process()]}
    before, scrape, stages = cpu_now(groups), await asyncio.to_thread(system.metrics), stage_cpu(groups)
    # Out of the collector's reach, what the benchmark holds so far cannot pause the
    # client for tens of ms (a full collection here), which would read as the server's.
    gc.freeze()
    start = time.perf_counter()
    streams = await speak()
    wall = time.perf_counter() - start
    row = {"system": system.name, "workload": name, "level": level, "wall_s": round(wall, 2)}
    row |= summarize(streams)
    row["cpu"] = cpu_use(before, cpu_now(groups), wall, row["audio_s"])
    if stages:
        row["triton_stages_cpu_s"] = {k: round(v - stages.get(k, 0.0), 2) for k, v in stage_cpu(groups).items()}
    row["server_times"] = server_times(scrape, await asyncio.to_thread(system.metrics))
    return row


def rounds_for(level: int, args: argparse.Namespace) -> int:
    """At least --rounds each, and at least --min-streams in all, so p99 means something."""
    return max(args.rounds, math.ceil(args.min_streams / level))


def log_row(row: dict, label: str) -> None:
    t, lsf = row["ttfp_ms"], row["lsf_ms"]
    log(f"{row['system']} {row['workload']} {label}: TTFP p50 {t['p50']:.0f} p99 {t['p99']:.0f} ms, L_sf p99 "
        f"{lsf['p99']:.0f} ms, {row['throughput_audio_s_per_s']:.1f} audio-s/s, {row['stalls']} stalls, "
        f"{row['refused']} refused, {row['errors']} errors")


async def bench_system(system: System, args: argparse.Namespace, capacity: dict | None) -> tuple[list[dict], list[dict]]:
    """Rows at each level of --levels (per workload), then rows of listeners at each
    multiple of C (`capacity`: its workload, C and the levels; None to skip them)."""
    rows, capacity_rows, warm_ups = [], [], {}
    for name in args.workloads:
        [warm_ups[name]] = await run_level(system.connect, workload(name), 1, 1)  # not counted
        for level in args.levels:
            rows.append(await measure(system, name, level, rounds_for(level, args), args.listen, args.level_seconds))
            log_row(rows[-1], f"x{level}")
    for of_c, level in (capacity or {}).get("levels", []):
        row = await measure(system, capacity["workload"], level, 1, True, args.level_seconds)
        capacity_rows.append(row | {"of_capacity": of_c, "arrivals": "together"})
        log_row(row, f"{of_c:g} x C = {level} listeners")
    if capacity and capacity["arrival_levels"]:
        capacity_rows += await arrival_rows(system, capacity, args.arrival_seconds, warm_ups[capacity["workload"]])
    return rows, capacity_rows


async def arrival_rows(system: System, capacity: dict, seconds: float, probe: Stream) -> list[dict]:
    """A row per multiple x of C in `capacity`: listeners arriving as a Poisson process
    for `seconds`, at the rate that keeps x·C of them listening on average (C over the
    workload's audio length, as `probe`, its warm-up utterance, measured it)."""
    name = capacity["workload"]
    if not probe.ok:
        log(f"{system.name}: no Poisson levels, the warm-up utterance failed ({probe.error})")
        return []
    rows = []
    for of_c in capacity["arrival_levels"]:
        rate = of_c * capacity["C"] / probe.audio_s
        arrivals = poisson_arrivals(rate, seconds)
        row = await measure_streams(system, name, len(arrivals),
                                    lambda: run_arrivals(system.connect, workload(name), arrivals))
        rows.append(row | {"of_capacity": of_c, "arrivals": "poisson", "rate_per_s": rate})
        log_row(row, f"{of_c:g} x C as Poisson arrivals ({len(arrivals)} listeners over {seconds:g} s)")
    return rows


def capacity_levels(args: argparse.Namespace, limit: dict[str, dict], floor: dict[str, dict]) -> dict | None:
    """The references of DESIGN.md for the workload the capacity levels speak (paragraph
    where run): C (the compute limit, audio-s/s), T_sent (ms), and the levels as
    (multiple of C, listeners); and the least compute of a first packet (ms on a core)
    and the cores, which bound how soon the last of streams started together can start."""
    name = "paragraph" if "paragraph" in args.workloads else args.workloads[0]
    if not (args.capacity_levels or args.arrival_levels) or name not in limit:
        return None
    c = limit[name]["audio_s_per_s"]
    return {"workload": name, "C": c, "t_sent_ms": floor[name]["t_sent_ms"],
            "first_packet_ms": floor[name]["pieces_ms"], "cores": limit[name]["cores"],
            "levels": [(of_c, max(1, round(of_c * c))) for of_c in args.capacity_levels],
            "arrival_levels": args.arrival_levels}
