"""The autoregressive family through the gateway, as a client hears it: at each level, N
protocol-v1 `speak` streams at once (each on a connection of its own, an AR voice), and
for each stream when it was asked, when its first audio came, when it ended, or that it
was refused (`server_busy`, as the gateway's admission says).

    python -m perf.ar.gateway --url ws://127.0.0.1:8080/v1/stream [--levels 2 3 4] [--rounds 7]
                              [--voice tara] [--out DIR]

Against a server started apart (`scripts/serve --ar-model DIR`); run it in a session of
its own (`setsid`), so that no CPU-bound process shares its scheduling group. The client
only awaits its sockets (no busy loop), and reports its own longest stall beside the
figures (perf/tools/host_load.py). Per admitted stream: first audio in seconds and as a
fraction of its time from request to end, and its underruns (a player starting
PLAYER_LEAD_S after its first audio, in real time: what holding a start until it is safe
trades a later start for); over all levels, first audio's p50 and p99 and how many
streams had it after LATE_FIRST of their time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from perf.ar.bench import LATE_FIRST, TEXT
from perf.tools.host_load import ClientStalls
from perf.tools.playback import stalls
from speechstream.client import SpeechClient, audio_end_s
from speechstream.client.events import SpeechError


@dataclass
class Stream:
    level: int
    round: int
    index: int
    asked_s: float  # since the level started
    first_s: float | None = None  # first audio frame, since asked
    end_s: float | None = None  # `done`, since asked
    refused: str | None = None  # the error code, when it was refused or failed
    audio_s: float = 0.0  # the audio it delivered
    underruns: int = 0  # times a player starting PLAYER_LEAD_S after its first audio ran dry
    asked_at: float = 0.0  # time.time() when it was asked, to match the server's logs

    @property
    def first_of_time(self) -> float | None:
        return None if self.first_s is None or not self.end_s else self.first_s / self.end_s


async def one_stream(url: str, text: str, voice: str, stream: Stream, start: float) -> None:
    client = await SpeechClient.connect(url, voice=voice)
    try:
        context = client.context()
        asked = await context.speak(text)
        stream.asked_s, stream.asked_at = asked - start, time.time() - (time.perf_counter() - asked)
        arrivals = []  # (when, where its audio ends) per frame
        try:
            async for event in context.events():
                if event.frame is not None:
                    arrivals.append((event.at - asked, audio_end_s(event.frame, client.ready)))
                if event.ends:
                    stream.end_s = event.at - asked
        except SpeechError as e:
            stream.refused = e.code
        if arrivals:
            stream.first_s, stream.audio_s = arrivals[0][0], arrivals[-1][1]
            stream.underruns = stalls(arrivals)[0]
    finally:
        await client.close()


async def level(url: str, streams: int, number: int, voice: str, text: str) -> list[Stream]:
    start = time.perf_counter()
    runs = [Stream(streams, number, i, 0.0) for i in range(streams)]
    await asyncio.gather(*(one_stream(url, f"{text} {number * 10 + i}", voice, s, start) for i, s in enumerate(runs)))
    return runs


def underruns(streams: list[Stream]) -> str:
    """"N (S)": N underruns in S streams."""
    return f"{sum(s.underruns for s in streams)} ({sum(1 for s in streams if s.underruns)})"


def summary(runs: list[Stream], stall_s: float) -> str:
    admitted = [s for s in runs if s.refused is None and s.first_s is not None]
    refused = [s for s in runs if s.refused is not None]
    firsts = np.array([s.first_s for s in admitted])
    late = [s for s in admitted if s.first_of_time > LATE_FIRST]
    p50, p99 = np.percentile(firsts, 50), np.percentile(firsts, 99)
    levels = len({(s.level, s.round) for s in runs})
    rows = ["| streams asked | levels | admitted | refused | first audio p50 ms | p99 ms | max ms "
            "| latest first ÷ time | after 60 % | underruns (streams) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for n in sorted({s.level for s in runs}):
        at = [s for s in admitted if s.level == n]
        f = np.array([s.first_s for s in at])
        rows.append(f"| {n} | {len({s.round for s in runs if s.level == n})} | {len(at)} "
                    f"| {sum(1 for s in refused if s.level == n)} | {1000 * np.percentile(f, 50):.0f} "
                    f"| {1000 * np.percentile(f, 99):.0f} | {1000 * f.max():.0f} "
                    f"| {max(s.first_of_time for s in at):.2f} | {sum(1 for s in at if s.first_of_time > LATE_FIRST)} "
                    f"| {underruns(at)} |")
    rows.append("")
    rows.append(f"Over {levels} levels: {len(admitted)} streams admitted, {len(refused)} refused "
                f"({', '.join(sorted({s.refused for s in refused})) or 'none'}); first audio p50 {1000 * p50:.0f} ms, "
                f"p99 {1000 * p99:.0f} ms (p99 ÷ p50 {p99 / p50:.2f}); {len(late)} of {len(admitted)} after "
                f"{LATE_FIRST:.0%} of their time, the latest at {max(s.first_of_time for s in admitted):.2f}; "
                f"underruns {underruns(admitted)}. "
                f"The client's longest stall: {1000 * stall_s:.0f} ms.")
    return "\n".join(rows)


async def run(url: str, levels: list[int], rounds: int, voice: str, text: str,
              pause_s: float) -> tuple[list[Stream], float]:
    await level(url, 1, -1, voice, text)  # warm
    runs: list[Stream] = []
    with ClientStalls() as stalls:
        for r in range(rounds):
            for n in levels:
                done = await level(url, n, r, voice, text)
                runs += done
                for s in done:
                    print(f"level {n} round {r} stream {s.index}: asked {s.asked_s:.3f} s ({s.asked_at:.3f}), first "
                          f"{s.first_s if s.first_s is None else round(s.first_s, 3)} s, end "
                          f"{s.end_s if s.end_s is None else round(s.end_s, 3)} s, audio {s.audio_s:.2f} s"
                          + (f", {s.first_of_time:.2f} of its time" if s.first_of_time is not None else "")
                          + (f", {s.underruns} underruns" if s.underruns else "")
                          + (f", refused {s.refused}" if s.refused else ""), flush=True)
                await asyncio.sleep(pause_s)  # the streams ended; the capacity they held comes back
    return runs, stalls.longest_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8080/v1/stream")
    parser.add_argument("--levels", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--rounds", type=int, default=7, help="times each level is run")
    parser.add_argument("--voice", default="tara")
    parser.add_argument("--text", default=TEXT, help="each stream's text (a number is added to it)")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between levels")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs, stall = asyncio.run(run(args.url, args.levels, args.rounds, args.voice, args.text, args.pause))
    report = summary(runs, stall)
    print(report)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ar-gateway.md").write_text(report + "\n")
        (args.out / "ar-gateway.json").write_text(json.dumps([asdict(s) for s in runs], indent=1))


if __name__ == "__main__":
    main()
