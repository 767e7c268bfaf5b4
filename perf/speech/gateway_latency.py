"""Time to first audio over the gateway's WebSocket (protocol v1, Opus), per workload.

    python -m perf.speech.gateway_latency --url ws://127.0.0.1:8080/v1/stream --runs 5

Prints medians over the runs, one stream at a time: `speak` sent → first audio frame
(TTFP), → last frame, and the audio's duration.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from perf.tools.workloads import WORKLOADS, workload
from speechstream.client import SpeechClient, audio_end_s


async def measure(url: str, text: str) -> tuple[float, float, float]:
    """(s to the first frame, s to the last frame, audio s) of one utterance, on the
    client library's clock (the `speak` going out, each frame's arrival)."""
    client = await SpeechClient.connect(url)
    try:
        context = client.context()
        sent = await context.speak(text)
        arrivals = [(e.at - sent, audio_end_s(e.frame, client.ready)) async for e in context.events() if e.frame]
        return arrivals[0][0], arrivals[-1][0], arrivals[-1][1]
    finally:
        await client.close()


async def run(url: str, runs: int) -> None:
    await measure(url, workload("short"))  # warm up
    print("| workload | TTFP ms | last frame ms | audio s |")
    print("|---|---|---|---|")
    for name in WORKLOADS:
        results = [await measure(url, workload(name)) for _ in range(runs)]
        first, last, audio = (statistics.median(x) for x in zip(*results))
        print(f"| {name} | {first * 1000:.1f} | {last * 1000:.0f} | {audio:.2f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8080/v1/stream")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    asyncio.run(run(args.url, args.runs))


if __name__ == "__main__":
    main()
