"""The gateway's CPU per delivered audio second, on its own: what the gateway's share of
the cost of a stream is (receiving Triton's chunks, resampling, Opus, one WebSocket
message per 20 ms frame), without the rest of the bench.

    python -m perf.gateway.cpu --streams 3 --seconds 25 --rounds 2

Starts Triton and the gateway on free ports, warms them up, then per round keeps
`streams` Opus 48 kHz streams speaking the paragraph workload over and over for
`seconds`, each client reading as fast as the frames come, and prints the gateway
process's CPU (user + system) per audio second delivered. To compare two versions of
the gateway, run it from a checkout of each, alternately, on a quiet machine: the
figure moves with the host's speed, and only pairs run side by side compare.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import psutil

from operations.loopback import Servers, cpu_seconds
from perf.tools.workloads import workload
from speechstream.client import SpeechClient, audio_end_s


async def speak_until(url: str, deadline: float) -> float:
    """Speak the paragraph workload over and over on one connection until `deadline`;
    the audio seconds received."""
    audio_s = 0.0
    async with await SpeechClient.connect(url, format="opus", sample_rate=48000) as client:
        while time.monotonic() < deadline:
            frames = [frame async for frame in client.speak(workload("paragraph"))]
            audio_s += audio_end_s(frames[-1], client.ready)
    return audio_s


def measure(url: str, gateway_pid: int, streams: int, seconds: float) -> dict[str, float]:
    """`streams` streams for `seconds` (each finishing its paragraph): the audio seconds
    delivered, the gateway's CPU seconds, and its CPU ms per audio second."""
    gateway = psutil.Process(gateway_pid)
    before = cpu_seconds([gateway])

    async def run() -> list[float]:
        deadline = time.monotonic() + seconds
        return await asyncio.gather(*(speak_until(url, deadline) for _ in range(streams)))

    audio_s = sum(asyncio.run(run()))
    cpu_s = cpu_seconds([gateway]) - before
    return {"audio_s": audio_s, "cpu_s": cpu_s, "ms_per_audio_s": 1000 * cpu_s / audio_s}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gateway-cpu-") as logs:
        servers = Servers(Path(logs))
        servers.start()
        try:
            measure(servers.url, servers.gateway.pid, 1, 1.0)  # warm-up
            print("| round | streams | audio s | gateway CPU s | gateway CPU ms per audio s |")
            print("|---|---|---|---|---|")
            for round_ in range(1, args.rounds + 1):
                r = measure(servers.url, servers.gateway.pid, args.streams, args.seconds)
                print(f"| {round_} | {args.streams} | {r['audio_s']:.1f} | {r['cpu_s']:.2f} | {r['ms_per_audio_s']:.2f} |")
        finally:
            servers.stop()


if __name__ == "__main__":
    main()
