"""Benchmark: our gateway over real WebSockets against the compute limit and the peers.

    python -m perf.speech.bench                          # the full run, written to perf/results/speech
    python -m perf.speech.bench --rounds 1 --min-streams 16 --level-seconds 20   # the same in ~20 min on 2 busy cores
    python -m perf.speech.bench --quick --skip-peers     # a smoke run

In one invocation: (a) the compute limit, whole-utterance onnxruntime synthesis of the
same texts in process, one process per core (perf.speech.limit), before and after the servers,
the higher kept, and the floor of time to first audio (perf.speech.limit.ttfp_floor); (b) our
Triton + gateway, started on free loopback ports (or --url), N clients at once for each
concurrency level, each on its own WebSocket speaking the workload in Opus over protocol
v1; (c) the peers, Piper's HTTP server and wyoming-piper, on the same voice from the
benchmark's own environment (perf.speech.peers), at the same levels. Per level: TTFP
p50/p90/p99, per-stream RTF, throughput, underrun stalls and stalled ms (perf.tools.metrics),
and the CPU of the server processes, the gateway apart from Triton and Triton's by
stage (perf.speech.breakdown reads them against the limit's). Writes bench.json, bench.md,
ttfp.png and throughput.png into --out. Clients speak back to back (a saturating closed
loop) unless --listen makes each wait for its player to finish, like N real listeners.
Then, against C: listeners started together at --capacity-levels multiples of it, and
listeners arriving as a Poisson process at --arrival-levels multiples of it on average.

This module is the command line and the run; the systems under test are in
perf.speech.systems, the levels in perf.speech.levels, the CPU and metrics read around
each level in perf.speech.sampling.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from operations.environment import PROJECT_ROOT
from perf.speech.formats import measure_formats
from perf.speech.goals import goals
from perf.speech.levels import bench_system, capacity_levels
from perf.speech.limit import compute_limit, ttfp_floor
from perf.speech.report import write_report
from perf.speech.systems import log, ours, piper_http, wyoming_piper
from perf.tools.workloads import workload

LEVELS = (1, 2, 4, 8, 16, 32)
QUICK_LEVELS = (1, 2)
QUICK_ARRIVAL_S = 15.0  # of Poisson arrivals in a smoke run
WORKLOADS = ("short", "paragraph")
RESULTS = Path(__file__).parents[1] / "results" / "speech"


def machine() -> dict:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        model = "unknown CPU"
    return {"model": model, "cores": os.cpu_count(), "loadavg_before": os.getloadavg()}


def commit() -> str:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=PROJECT_ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return (git("rev-parse", "--short", "HEAD") or "unknown") + ("-dirty" if dirty else "")


def measure_limit(texts: dict[str, str], seconds: float, when: str) -> dict[str, dict]:
    log(f"compute limit {when}: {os.cpu_count()} processes, {seconds:g} s per workload")
    limit = compute_limit(texts, seconds)
    log(f"compute limit {when}: {limit}")
    return limit


def best_limit(runs: list[dict[str, dict]]) -> dict[str, dict]:
    """Per workload, the run with the higher rate: a ceiling is lowered, never raised, by
    whatever else the shared machine was running at the time."""
    return {name: max((run[name] for run in runs), key=lambda limit: limit["audio_s_per_s"]) for name in runs[0]}


def run(args: argparse.Namespace) -> dict:
    texts = {name: workload(name) for name in args.workloads}
    results = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(), "commit": commit(),
               "command": "python -m perf.speech.bench " + " ".join(sys.argv[1:]), "levels": args.levels,
               "workloads": args.workloads, "mode": "listeners" if args.listen else "back to back",
               "options": {k: getattr(args, k) for k in ("rounds", "min_streams", "level_seconds", "limit_seconds", "listen",
                                                        "capacity_levels", "arrival_levels", "arrival_seconds")},
               "limit": {}, "runs": []}
    limits = [measure_limit(texts, args.limit_seconds, "before the servers")] if args.limit_seconds > 0 else []
    if args.limit_seconds > 0:
        results["ttfp_floor"] = {name: ttfp_floor(text) for name, text in texts.items()}
        log(f"TTFP floor: {results['ttfp_floor']}")
    capacity = capacity_levels(args, limits[0], results["ttfp_floor"]) if limits else None
    if capacity:
        log(f"references: C = {capacity['C']:.1f} audio-s/s, T_sent = {capacity['t_sent_ms']:.0f} ms; "
            f"listeners at {capacity['levels']}, Poisson arrivals at {capacity['arrival_levels']} x C")
    results["capacity"], results["capacity_runs"] = capacity, []
    log_dir = Path(tempfile.mkdtemp(prefix="bench-"))
    systems = [lambda: ours(args.url, log_dir)]
    if not args.skip_peers:
        systems += [lambda: piper_http(log_dir), lambda: wyoming_piper(log_dir)]
    for start in systems:  # one at a time, so that no two compete for the cores
        with ExitStack() as stack:
            system = stack.enter_context(start())
            rows, capacity_rows = asyncio.run(bench_system(system, args, capacity))
            results["runs"] += rows
            results["capacity_runs"] += capacity_rows
            if system.http_url and args.format_rounds:
                results["formats"] = asyncio.run(
                    measure_formats(system.http_url, workload(args.workloads[0]), args.format_rounds)
                )
                log("first audio per HTTP format (p50 ms): " + ", ".join(
                    f"{fmt} {f['p50_ms']:.0f}" for fmt, f in results["formats"].items()))
    if limits:
        limits.append(measure_limit(texts, args.limit_seconds, "after the servers"))
        results["limit_runs"], results["limit"] = limits, best_limit(limits)
    results["machine"]["loadavg_after"] = os.getloadavg()
    results["goals"] = goals(results)
    return results


def levels(text: str) -> list[int]:
    return [int(n) for n in text.split(",")]


def multiples(text: str) -> list[float]:
    return [float(n) for n in text.split(",") if n]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m perf.speech.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="benchmark this gateway (ws://.../v1/stream) instead of starting one")
    parser.add_argument("--levels", type=levels, help=f"concurrency levels, comma-separated (default {','.join(map(str, LEVELS))})")
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS), help="perf.tools.workloads names, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="utterances per client (more at low levels, see --min-streams; fewer past --level-seconds)")
    parser.add_argument("--min-streams", type=int, default=24, help="utterances per level at least (more rounds at low levels)")
    parser.add_argument("--level-seconds", type=float, default=60.0,
                        help="no client starts another utterance after this long into a level (each speaks once)")
    parser.add_argument("--limit-seconds", type=float, default=10.0, help="compute-limit run per workload (0 skips it)")
    parser.add_argument("--capacity-levels", type=multiples, default=[0.75, 3.0],
                        help="then listeners (real time, one paragraph each, started together) at these multiples of "
                             "C, comma-separated; empty for none (default 0.75,3)")
    parser.add_argument("--arrival-levels", type=multiples, default=[0.75],
                        help="then listeners arriving as a Poisson process (one paragraph each) at these multiples of C "
                             "on average, comma-separated; empty for none (default 0.75)")
    parser.add_argument("--arrival-seconds", type=float, default=60.0, help="how long listeners arrive, per Poisson level")
    parser.add_argument("--listen", action="store_true", help="clients wait for their player to finish before speaking again")
    parser.add_argument("--format-rounds", type=int, default=10,
                        help="requests per HTTP response_format for the first-audio table (0 skips it)")
    parser.add_argument("--skip-peers", action="store_true", help="no piper-http or wyoming-piper")
    parser.add_argument("--quick", action="store_true", help=f"smoke run: levels {QUICK_LEVELS} unless --levels, 1 round, 4 streams, 2 s limit, 2 format rounds")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for bench.json, bench.md and the plots")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.min_streams, args.limit_seconds = 1, 4, min(args.limit_seconds, 2.0)
        args.format_rounds = min(args.format_rounds, 2)
        args.capacity_levels = [f for f in args.capacity_levels if f < 1]
        args.arrival_seconds = min(args.arrival_seconds, QUICK_ARRIVAL_S)
    args.levels = args.levels or list(QUICK_LEVELS if args.quick else LEVELS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("matplotlib") is None:  # fail now, not after the measuring
        sys.exit("perf.speech.bench draws with matplotlib: pip install -e '.[bench]'")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop what we started, as on Ctrl-C
    try:
        results = run(args)
    except KeyboardInterrupt:
        log("interrupted; what it started has been stopped")
        return 130
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps(results, indent=1) + "\n")
    print(write_report(results, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
