"""Fairness: a normal client's time to audio beside one greedy address.

    python -m perf.gateway.fairness

Starts its own tritonserver and a gateway with the default per-address caps on free
loopback ports. The normal client (from 127.0.0.1) speaks Harvard sentences one after
another, --rounds times, unloaded; then one greedy address (127.0.0.2) opens 20
WebSocket clients that each ask for a long text and never read, 100 concurrent speech
POSTs that never read past the status line and 200 slow-loris connections; the normal
client speaks the same sentences again beside them, and once more AFTER_S after the
flood's sockets closed. Reported, as ratios to unloaded in this run: time to first audio
(TTFP) and stall-free start (L_sf, DESIGN.md) at p50 and p90, beside the flood and after
it (goal ≤ 1.5), what the greedy address got (429s), and the gateway's RSS growth (goal
< 20 MB). A table on stdout; fairness.json, fairness.md and
fairness.png in --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

from operations.loopback import Servers
from perf.gateway import floods
from perf.speech.clients import GatewayClient
from perf.tools.metrics import Stream, percentile
from perf.tools.plots import pyplot
from perf.tools.workloads import harvard_sentences

RESULTS = Path(__file__).parents[1] / "results" / "fairness"
GREEDY = "127.0.0.2"
NON_READERS, POSTS, SLOW_HEADS = 20, 100, 200
AFTER_S = 3.0  # how long after the flood the normal client speaks again
GOAL_RATIO, GOAL_RSS_MB = 1.5, 20


async def speak_all(url: str, sentences: list[str]) -> list[Stream]:
    """The normal client: each sentence in turn on one connection, read as it comes."""
    client = await GatewayClient.connect(url)
    try:
        return [await client.speak(text) for text in sentences]
    finally:
        await client.close()


def percentiles(streams: list[Stream]) -> dict[str, dict[str, float]]:
    ok = [s for s in streams if s.ok]
    figures = {"ttfp_ms": [s.ttfp_s * 1000 for s in ok], "lsf_ms": [s.stall_free_start_s * 1000 for s in ok]}
    return {name: {"p50": round(percentile(v, 50), 1), "p90": round(percentile(v, 90), 1), "samples": v}
            for name, v in figures.items()} | {"errors": len(streams) - len(ok)}


def measure(servers: Servers, rounds: int) -> dict:
    sentences = harvard_sentences()[:rounds]
    asyncio.run(speak_all(servers.url, sentences[:2]))  # warm-up: what any stream loads
    gateway = psutil.Process(servers.gateway.pid)
    unloaded = percentiles(asyncio.run(speak_all(servers.url, sentences)))
    rss_before = gateway.memory_info().rss
    readers = floods.non_reading_websockets(servers.port, GREEDY, NON_READERS, " ".join(harvard_sentences()[:40]))
    posts = floods.speech_posts(servers.port, GREEDY, POSTS, " ".join(harvard_sentences()[40:48]))
    slow = floods.slow_heads(servers.port, [GREEDY], SLOW_HEADS)
    time.sleep(1)  # the flood is under way before the normal client speaks
    loaded = percentiles(asyncio.run(speak_all(servers.url, sentences)))
    rss_growth = gateway.memory_info().rss - rss_before
    statuses = [floods.status(sock) for sock in posts]
    for sock in readers + posts + slow:
        sock.close()
    time.sleep(AFTER_S)
    after = percentiles(asyncio.run(speak_all(servers.url, sentences)))
    ratios = {f"{phase}_{name}_{q}": round(measured[name][q] / unloaded[name][q], 2)
              for phase, measured in (("loaded", loaded), ("after", after))
              for name in ("ttfp_ms", "lsf_ms") for q in ("p50", "p90")}
    return {
        "unloaded": unloaded, "loaded": loaded, "after": after, "ratios": ratios,
        "greedy": {"websockets": NON_READERS, "posts": POSTS, "slow_heads": SLOW_HEADS,
                   "posts_200": statuses.count(200), "posts_429": statuses.count(429),
                   "posts_other": len(statuses) - statuses.count(200) - statuses.count(429)},
        "gateway_rss_growth_mb": round(rss_growth / 2**20, 1),
    }


def table(r: dict) -> str:
    u, lo, af, ra, g = r["unloaded"], r["loaded"], r["after"], r["ratios"], r["greedy"]
    rows = ["| measure | unloaded | beside the greedy address | ratio | "
            f"{AFTER_S:.0f} s after it | ratio | goal |", "|---|---|---|---|---|---|---|"]
    for name, label in (("ttfp_ms", "TTFP"), ("lsf_ms", "L_sf")):
        for q in ("p50", "p90"):
            rows.append(f"| normal client {label} {q} (ms) | {u[name][q]} | {lo[name][q]} | "
                        f"{ra[f'loaded_{name}_{q}']} | {af[name][q]} | {ra[f'after_{name}_{q}']} | ≤ {GOAL_RATIO} |")
    rows.append(f"| normal client errors | {u['errors']} | {lo['errors']} | | {af['errors']} | | 0 |")
    rows.append(f"| greedy POSTs: 200 / 429 / other | | {g['posts_200']} / {g['posts_429']} / {g['posts_other']} "
                "| | | | |")
    rows.append(f"| gateway RSS growth (MB) | | {r['gateway_rss_growth_mb']} | | | | < {GOAL_RSS_MB} |")
    return "\n".join(rows)


def plot(r: dict, path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (name, label) in zip(axes, (("ttfp_ms", "TTFP"), ("lsf_ms", "L_sf"))):
        ax.boxplot([r[phase][name]["samples"] for phase in ("unloaded", "loaded", "after")], whis=(0, 100))
        ax.set_xticks([1, 2, 3], ["unloaded", f"beside {NON_READERS} non-readers\n+ {POSTS} POSTs\n"
                                  f"+ {SLOW_HEADS} slow heads", f"{AFTER_S:.0f} s after"])
        ax.set_ylabel(f"{label} (ms)")
        ax.set_title(f"normal client's {label}")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.gateway.fairness", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="sentences the normal client speaks each way")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--max-lead", type=float, help="the gateway's --max-lead (0: streams never pause; to compare)")
    args = parser.parse_args(argv)
    lead = () if args.max_lead is None else ("--max-lead", str(args.max_lead))
    servers = Servers(Path(tempfile.mkdtemp(prefix="fairness-")), gateway_flags=("--probe-interval", "0", *lead))
    try:
        servers.start()
        results = measure(servers, args.rounds)
    finally:
        servers.stop()
    results |= {"date": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
                "command": "python -m perf.gateway.fairness " + " ".join(sys.argv[1:])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fairness.json").write_text(json.dumps(results, indent=1) + "\n")
    markdown = f"# Fairness\n\n{results['date']} on `{results['host']}`, `{results['command']}`\n\n{table(results)}\n"
    (args.out / "fairness.md").write_text(markdown)
    plot(results, args.out / "fairness.png")
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
