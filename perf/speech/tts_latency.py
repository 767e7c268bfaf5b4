"""First-response time and real-time factor of the `tts` model over gRPC, per workload.

    python -m perf.speech.tts_latency --url 127.0.0.1:8001 --runs 5

Prints, per workload, medians over the runs: time to the first PCM chunk, time to the
last, audio seconds and RTF (synthesis wall time ÷ audio duration), one stream at a time.
"""

from __future__ import annotations

import argparse
import statistics

from contract import models as c
from contract.voices import EMBEDDED
from operations.triton_client import stream
from perf.tools.workloads import WORKLOADS, workload

SAMPLE_RATE = EMBEDDED.sample_rate


def measure(url: str, text: str) -> tuple[float, float, float]:
    chunks = stream(url, c.TTS_MODEL, {c.TEXT: text})
    audio = sum(r.get(c.PCM).size for r in chunks) / SAMPLE_RATE
    return chunks[0].seconds, chunks[-1].seconds, audio


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8001")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    measure(args.url, workload("short"))  # warm up
    print("| workload | first chunk ms | last chunk ms | audio s | RTF |")
    print("|---|---|---|---|---|")
    for name in WORKLOADS:
        runs = [measure(args.url, workload(name)) for _ in range(args.runs)]
        first, last, audio = (statistics.median(x) for x in zip(*runs))
        print(f"| {name} | {first * 1000:.1f} | {last * 1000:.0f} | {audio:.2f} | {last / audio:.3f} |")


if __name__ == "__main__":
    main()
