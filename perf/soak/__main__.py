"""The command line, `python -m perf.soak`: starts the servers, runs the soak, writes the
report; exit status 1 when a goal is missed."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import perf.soak
from operations.loopback import Servers
from perf.soak.chaos import FAULT_SETS
from perf.soak.goals import missed
from perf.soak.report import write
from perf.soak.run import soak

MAX_DURATION_S = 600.0
MIN_DURATION_S = 30.0
RESULTS = Path(__file__).parents[1] / "results" / "soak"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m perf.soak", description=perf.soak.__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=MAX_DURATION_S, help="seconds of calibration + soak (≤ 600)")
    parser.add_argument("--clients", type=int, help="listeners; skips the calibration (default: capacity / 2)")
    parser.add_argument("--calibration-streams", type=int, default=8, help="concurrent speaks while calibrating")
    parser.add_argument("--cancel", type=float, default=0.15, help="probability that an utterance is cancelled")
    parser.add_argument("--abort", type=float, default=0.10, help="probability that a listener drops its connection")
    parser.add_argument("--chaos", nargs="?", const="all", choices=sorted(FAULT_SETS),
                        help="a stage fault every --fault-every s, Triton supervised: the vocoder's (failover), "
                        "the tts stage's (resumed), or all in turn (the default)")
    parser.add_argument("--fault-every", type=float, default=60.0, help="seconds between faults under --chaos")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="directory for soak.json and soak.md (soak-chaos[-SET].json and .md)")
    args = parser.parse_args(argv)
    if not MIN_DURATION_S <= args.duration <= MAX_DURATION_S:
        parser.error(f"--duration must be {MIN_DURATION_S:g} to {MAX_DURATION_S:g} s")
    return args


def main(argv: list[str] | None = None) -> int:
    """Exit status 1 when a goal of zero (errors, leaks) is missed."""
    args = parse_args(argv)
    # No admission: the calibration saturates the server on purpose, and the soak stays at half of it.
    servers = Servers(Path(tempfile.mkdtemp(prefix="soak-")), gateway_flags=(*Servers.ONE_ADDRESS, "--admission-load", "0"))
    print(f"logs: {servers.logs['gateway'].parent}", flush=True)
    try:
        servers.start()
        results = asyncio.run(soak(args, servers))
    finally:
        shutdown = servers.stop()
    results.update(shutdown)
    print(write(results, args.out))
    return 1 if missed(results) else 0


if __name__ == "__main__":
    sys.exit(main())
