"""Benchmark: our gateway over real WebSockets against the compute limit and the peers.

    python -m perf.bench                          # the full run, written to perf/results
    python -m perf.bench --rounds 1 --min-streams 16 --level-seconds 20   # the same in ~20 min on 2 busy cores
    python -m perf.bench --quick --skip-peers     # a smoke run

In one invocation: (a) the compute limit, whole-utterance onnxruntime synthesis of the
same texts in process, one process per core (perf.limit), before and after the servers,
the higher kept, and the floor of time to first audio (perf.limit.ttfp_floor); (b) our
Triton + gateway, started on free loopback ports (or --url), N clients at once for each
concurrency level, each on its own WebSocket speaking the workload in Opus over protocol
v1; (c) the peers, Piper's HTTP server and wyoming-piper, on the same voice from the
benchmark's own environment (perf.peers), at the same levels. Per level: TTFP
p50/p90/p99, per-stream RTF, throughput, underrun stalls and stalled ms (perf.metrics),
and the CPU of the server processes, the gateway apart from Triton and Triton's by
stage (perf.breakdown reads them against the limit's). Writes bench.json, bench.md,
ttfp.png and throughput.png into --out. Clients speak back to back (a saturating closed
loop) unless --listen makes each wait for its player to finish, like N real listeners.
Then, against C: listeners started together at --capacity-levels multiples of it, and
listeners arriving as a Poisson process at --arrival-levels multiples of it on average.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import psutil

from operations.environment import PROJECT_ROOT
from operations.loopback import Servers, cpu_seconds, stop, triton_metrics
from perf.clients import (
    Connect,
    GatewayClient,
    PiperHttpClient,
    WyomingClient,
    poisson_arrivals,
    run_arrivals,
    run_level,
)
from perf.formats import measure_formats
from perf.goals import OURS, goals
from perf.limit import compute_limit, ttfp_floor
from perf.metrics import Stream, summarize
from perf.peers import start_piper_http, start_wyoming_piper
from perf.report import write_report
from perf.workloads import workload

LEVELS = (1, 2, 4, 8, 16, 32)
QUICK_LEVELS = (1, 2)
QUICK_ARRIVAL_S = 15.0  # of Poisson arrivals in a smoke run
WORKLOADS = ("short", "paragraph")
RESULTS = Path(__file__).parent / "results"

Groups = dict[str, list[psutil.Process]]


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


@dataclass
class System:
    """A server under test: how to open a client on it, and its processes by CPU group."""

    name: str
    connect: Connect
    groups: Callable[[], Groups]
    metrics: Callable[[], dict[str, float]] = dict  # the server's Prometheus samples, if it has them
    http_url: str | None = None  # its OpenAI speech API (http://host:port/v1), if it has one


SERVER_TIMES = {  # the gateway's own view of where a first packet's time went
    "triton_first_response_ms_mean": "speechstream_triton_first_response_seconds",
    "gateway_ttfp_ms_mean": "speechstream_ttfp_seconds",
}


def api_base(url: str) -> str:
    """The OpenAI speech API beside the gateway's WebSocket (ws://host:port/v1/stream)."""
    return url.replace("ws://", "http://", 1).replace("wss://", "https://", 1).rsplit("/v1/", 1)[0] + "/v1"


def gateway_metrics(url: str) -> Callable[[], dict[str, float]]:
    """The gateway's /metrics on the WebSocket's host and port; {} when unreachable."""
    where = urlparse(url)

    def read() -> dict[str, float]:
        try:
            return triton_metrics(where.port or 80, where.hostname or "127.0.0.1")  # any Prometheus endpoint
        except OSError:
            return {}

    return read


def server_times(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """Mean of each SERVER_TIMES histogram over what happened between two scrapes (ms)."""
    out = {}
    for key, name in SERVER_TIMES.items():
        count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        total = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
        out[key] = round(1000 * total / count, 1) if count else None
    return out


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def listening(port: int) -> psutil.Process | None:
    """The local process that accepts connections on `port`, if any."""
    for c in psutil.net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid:
            return psutil.Process(c.pid)
    return None


def found_groups(url: str) -> Groups:
    """For --url: the gateway listening on the URL's port and the tritonserver (with its
    stubs) it is connected to, when they run on this machine; else nothing to measure."""
    gateway = listening(urlparse(url).port or 80)
    if gateway is None:
        return {}
    groups = {"gateway": [gateway]}
    for port in {c.raddr.port for c in gateway.net_connections("tcp") if c.raddr}:
        if (triton := listening(port)) is not None and triton.name() == "tritonserver":
            groups["triton"] = tree(triton.pid)
    return groups


@contextmanager
def ours(url: str | None, log_dir: Path) -> Iterator[System]:
    """Our gateway at `url`, or our own Triton + gateway, stopped afterwards."""
    if url:
        yield System(OURS, lambda: GatewayClient.connect(url), lambda: found_groups(url), gateway_metrics(url),
                     api_base(url))
        return
    servers = Servers(log_dir)
    try:
        log(f"starting tritonserver and the gateway (logs in {log_dir})")
        servers.start()
        groups = lambda: {"gateway": [psutil.Process(servers.gateway.pid)], "triton": servers.triton_tree()}  # noqa: E731
        yield System(OURS, lambda: GatewayClient.connect(servers.url), groups, gateway_metrics(servers.url),
                     api_base(servers.url))
    finally:
        log("stopping tritonserver and the gateway")
        servers.stop()


@contextmanager
def piper_http(log_dir: Path) -> Iterator[System]:
    with (log_dir / "piper_http.log").open("w") as f:
        log("starting piper.http_server")
        process, url = start_piper_http(f)
        try:
            yield System("piper-http", lambda: PiperHttpClient.connect(url), lambda: {"server": tree(process.pid)})
        finally:
            stop(process)


@contextmanager
def wyoming_piper(log_dir: Path) -> Iterator[System]:
    with (log_dir / "wyoming_piper.log").open("w") as f:
        log("starting wyoming_piper")
        process, port = start_wyoming_piper(f, log_dir)
        try:
            yield System("wyoming-piper", lambda: WyomingClient.connect("127.0.0.1", port), lambda: {"server": tree(process.pid)})
        finally:
            stop(process)


def machine_busy() -> float:
    """CPU seconds all cores spent on anything but idling, since boot."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def cpu_use(before: dict[str, float], after: dict[str, float], wall_s: float, audio_s: float) -> dict:
    """Per group: CPU seconds, cores busy on average, and CPU seconds per audio second;
    "others" is what the rest of this shared machine took meanwhile."""
    used = {name: after[name] - before[name] for name in before}
    used["others"] = max(0.0, used.pop("machine") - sum(used.values()))
    return {
        name: {"cpu_s": round(cpu_s, 2), "cores": round(cpu_s / wall_s, 3),
               "per_audio_s": round(cpu_s / audio_s, 4) if audio_s else None}
        for name, cpu_s in used.items()
    }


def cpu_now(groups: Groups) -> dict[str, float]:
    return {g: cpu_seconds(procs) for g, procs in groups.items()} | {"machine": machine_busy()}


def stage_of(proc: psutil.Process) -> str | None:
    """The model a Python backend stub serves (its command line names the model's
    model.py), "tritonserver" for the server itself, None once it has exited."""
    try:
        script = next((Path(a) for a in proc.cmdline() if Path(a).name == "model.py"), None)
    except psutil.NoSuchProcess:
        return None
    return script.parents[1].name if script else "tritonserver"


def stage_cpu(groups: Groups) -> dict[str, float]:
    """CPU seconds of Triton's running processes by stage, instances of a model added up."""
    stages: dict[str, float] = {}
    for proc in groups.get("triton", []):
        if (stage := stage_of(proc)) is not None:
            stages[stage] = stages.get(stage, 0.0) + cpu_seconds([proc])
    return stages


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
               "command": "python -m perf.bench " + " ".join(sys.argv[1:]), "levels": args.levels,
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
    parser = argparse.ArgumentParser(prog="python -m perf.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="benchmark this gateway (ws://.../v1/stream) instead of starting one")
    parser.add_argument("--levels", type=levels, help=f"concurrency levels, comma-separated (default {','.join(map(str, LEVELS))})")
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS), help="perf.workloads names, comma-separated")
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
        sys.exit("perf.bench draws with matplotlib: pip install -e '.[bench]'")
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
