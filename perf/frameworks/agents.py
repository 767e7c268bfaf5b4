"""Time to first audio through the voice-agent framework plugins against protocol v1's own
client, in one run: what each plugin adds.

    python -m perf.frameworks.agents --turns 1,8 --rounds 3

Starts Triton and the gateway on free ports, then, per round and level, interleaved:
`turns` turns at once through Pipecat's service (a pipeline and a socket each, as a
voice-agent server runs one per call: tests/pipecat_driver.py), through LiveKit's plugin
(`turns` streams on one TTS, one socket: tests/livekit_driver.py), and through our
asyncio client in each of those two shapes; and Pipecat's own floor, the same turns
through a service that answers at once (what its pipeline alone takes). A turn is an LLM's reply sent as it streams
(tests/agent_turns.py: all its pieces at once, then its end); its time to first audio is
from its first piece to its first audio frame. The frameworks run in their own
environment (.venv-agents), so each of their runs is a process of its own; the client's
runs in this one. Prints the median and p90 of each, and each plugin's median less the
client's in the same shape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from operations.loopback import PROJECT_ROOT, Servers
from speechstream.client import SpeechClient
from tests.agent_turns import deltas

AGENTS_PYTHON = PROJECT_ROOT / ".venv-agents" / "bin" / "python"
DRIVERS = {"pipecat": "tests/pipecat_driver.py", "livekit": "tests/livekit_driver.py"}
# An LLM's short reply: two sentences, the first audio after the first.
REPLY = "Sure, the capital of France is Paris. It has been the seat of its government for centuries."


def plugin(framework: str, url: str, turns: int, mode: str = "ttfa") -> list[float]:
    """The driver's `mode`: seconds to first audio of each of `turns` turns at once."""
    run = subprocess.run([str(AGENTS_PYTHON), DRIVERS[framework], mode, url, str(turns), REPLY], cwd=PROJECT_ROOT,
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise RuntimeError(f"{framework}: {run.stderr[-2000:]}")
    result = json.loads(run.stdout.splitlines()[-1])
    if result.get("errors"):
        raise RuntimeError(f"{framework}: {result['errors']}")
    return result["ttfa_s"]


async def client(url: str, turns: int, sockets: int) -> list[float]:
    """The same turns through SpeechClient: on one connection each (`sockets` = turns), or
    all on one; after a warm-up turn on each connection, as the drivers' warm-ups."""
    connections = [await SpeechClient.connect(url, format="pcm_s16le", sample_rate=24000) for _ in range(sockets)]
    try:
        for connection in connections:
            [_ async for _ in connection.speak("Ready.")]
        return await asyncio.gather(*(turn(connections[i % sockets]) for i in range(turns)))
    finally:
        await asyncio.gather(*(c.close() for c in connections))


async def turn(connection: SpeechClient) -> float:
    context = connection.context()
    start = time.perf_counter()
    for piece in deltas(REPLY):
        await context.text(piece)
    await context.close()
    first = None
    async for event in context.events():
        if event.frame is not None and first is None:
            first = time.perf_counter()
    return first - start


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m perf.frameworks.agents", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="1,8", help="levels: turns at once, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    levels = [int(n) for n in args.turns.split(",")]
    with tempfile.TemporaryDirectory(prefix="frameworks-") as logs:
        servers = Servers(Path(logs))
        servers.start()
        try:
            seconds: dict[tuple[int, str], list[float]] = {}
            for _ in range(args.rounds):
                for n in levels:
                    runs = {
                        "pipecat (a socket each)": lambda: plugin("pipecat", servers.url, n),
                        "client, a socket each": lambda: asyncio.run(client(servers.url, n, n)),
                        "livekit (one socket)": lambda: plugin("livekit", servers.url, n),
                        "client, one socket": lambda: asyncio.run(client(servers.url, n, 1)),
                        "pipecat's own floor": lambda: plugin("pipecat", servers.url, n, "ttfa-floor"),
                    }
                    for path, measure in runs.items():
                        seconds.setdefault((n, path), []).extend(measure())
        finally:
            servers.stop()
    report(seconds, levels)


def report(seconds: dict[tuple[int, str], list[float]], levels: list[int]) -> None:
    print("| turns at once | path | turns | TTFA median ms | p90 ms | plugin − client, median ms |")
    print("|---|---|---|---|---|---|")
    for n in levels:
        medians = {path: 1000 * statistics.median(v) for (m, path), v in seconds.items() if m == n}
        against = {"pipecat (a socket each)": "client, a socket each", "livekit (one socket)": "client, one socket"}
        for path, median in medians.items():
            values = seconds[(n, path)]
            extra = f"{median - medians[against[path]]:+.1f}" if path in against else ""
            print(f"| {n} | {path} | {len(values)} | {median:.1f} | {1000 * p90(values):.1f} | {extra} |")


if __name__ == "__main__":
    main()
