"""The ceiling of the gateway alone: the streams one gateway process (and N workers)
keeps in real time when Triton answers at once.

    python -m perf.gateway.ceiling --streams 8,16,32,64 --seconds 10 --workers 1,2

First records what a real Triton answers for the paragraph workload (perf/gateway/replay.py in
front of it, one stream through a gateway); then, with the replay server in Triton's
place, keeps `streams` Opus 48 kHz streams speaking that paragraph over and over for
`seconds` at each level, each client reading as fast as the frames come, and prints
what was delivered: audio seconds per second in all, the slowest stream's rate (×
real time: a stream below 1 would stall its listener), and the CPU of the gateway
processes, the clients and the replay server. The streams kept in real time are the
most at which the slowest stream stays at 1 or more. Clients and replay share the host
with the gateway: on a machine with few cores they take what the gateway could use.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from operations.loopback import PROJECT_ROOT, Servers, cpu_seconds, free_ports, start_gateway, stop
from perf.gateway.cpu import speak_until
from perf.tools.workloads import workload
from speechstream.client import SpeechClient

# Triton stands in: nothing to probe, no fleet to read, every stream admitted.
GATEWAY_FLAGS = (*Servers.ONE_ADDRESS, "--probe-interval", "0", "--admission-load", "0", "--fleet-metrics-port", "0")


@contextlib.contextmanager
def replay(port: int, file: Path, log: Path, record_from: str | None = None) -> Iterator[subprocess.Popen]:
    """perf.gateway.replay on `port`, recording from `record_from` into `file`, or answering from it."""
    cmd = [sys.executable, "-m", "perf.gateway.replay", "--port", str(port), "--file", str(file)]
    cmd += ["--record", record_from] if record_from else []
    with log.open("a") as out:
        process = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, process, 30)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)  # a recording is written on SIGTERM
        process.wait(30)


def wait_for_port(port: int, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"perf.gateway.replay did not listen on {port}")
        time.sleep(0.1)


def record(logs: Path, file: Path) -> None:
    """What a real Triton answers for the paragraph, through a gateway, into `file`."""
    servers = Servers(logs)
    servers.triton.start(stdout=(logs / "tritonserver.log").open("w"))
    try:
        servers.triton.wait_ready(timeout=300)
        (port,) = free_ports(1)
        with replay(port, file, logs / "replay.log", f"127.0.0.1:{servers.triton.grpc_port}"):
            with (logs / "gateway-recording.log").open("w") as log:
                gateway, gateway_port = start_gateway(f"127.0.0.1:{port}", log, *GATEWAY_FLAGS)
            try:
                url = f"ws://127.0.0.1:{gateway_port}/v1/stream"
                asyncio.run(speak_once(url))
            finally:
                stop(gateway)
    finally:
        servers.triton.stop()


async def speak_once(url: str) -> None:
    async with await SpeechClient.connect(url, format="opus", sample_rate=48000) as client:
        assert [frame async for frame in client.speak(workload("paragraph"))], "no audio recorded"


def level(url: str, gateway: psutil.Process, replayer: psutil.Process, streams: int, seconds: float) -> dict:
    """`streams` streams for `seconds`: delivered audio, the slowest stream's rate, CPU."""
    processes = {"gateway": [gateway, *gateway.children()], "replay": [replayer], "client": [psutil.Process()]}
    before = {name: cpu_seconds(group) for name, group in processes.items()}
    start = time.monotonic()

    async def run() -> list[float]:
        return await asyncio.gather(*(speak_until(url, start + seconds) for _ in range(streams)))

    audio = asyncio.run(run())
    wall = time.monotonic() - start
    cores = {name: (cpu_seconds(group) - before[name]) / wall for name, group in processes.items()}
    return {"streams": streams, "audio_per_s": sum(audio) / wall, "slowest": min(audio) / wall, "cores": cores,
            "gateway_ms_per_audio_s": 1000 * cores["gateway"] * wall / sum(audio)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m perf.gateway.ceiling", description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="8,16,32,64", help="levels: concurrent streams, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", default="1,2", help="gateway workers to measure, comma-separated")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gateway-ceiling-") as tmp:
        logs, file = Path(tmp), Path(tmp) / "recording.json"
        record(logs, file)
        print(f"host: {psutil.cpu_count()} cores")
        print("| workers | streams | audio s/s delivered | slowest stream × real time | gateway ms per audio s "
              "| cores: gateway | clients | replay |")
        print("|---|---|---|---|---|---|---|---|")
        for workers in map(int, args.workers.split(",")):
            (port,) = free_ports(1)
            with replay(port, file, logs / "replay.log") as replayer:
                with (logs / f"gateway-{workers}.log").open("w") as log:
                    gateway, gateway_port = start_gateway(f"127.0.0.1:{port}", log, *GATEWAY_FLAGS,
                                                          "--gateway-workers", str(workers))
                try:
                    url = f"ws://127.0.0.1:{gateway_port}/v1/stream"
                    asyncio.run(speak_until(url, time.monotonic() + 1))  # warm-up
                    for streams in map(int, args.streams.split(",")):
                        r = level(url, psutil.Process(gateway.pid), psutil.Process(replayer.pid), streams, args.seconds)
                        c = r["cores"]
                        print(f"| {workers} | {streams} | {r['audio_per_s']:.1f} | {r['slowest']:.2f} "
                              f"| {r['gateway_ms_per_audio_s']:.2f} | {c['gateway']:.2f} | {c['client']:.2f} "
                              f"| {c['replay']:.2f} |", flush=True)
                finally:
                    stop(gateway)


if __name__ == "__main__":
    main()
