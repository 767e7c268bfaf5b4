"""The autoregressive family's benchmark: first packet split into its parts, and tokens
and frames per second, per stream and in aggregate, at 1/4/8 streams, against the
in-process limit of the same two models (perf/ar/limit.py).

    python -m perf.ar.bench --out DIR [--ar-model DIR] [--levels 1 4 8] [--rounds 5] [--frames 48] [--guidance-scale 2]
                      [--load N] [--gpu]

Without --ar-model it builds and serves the tests' tiny Orpheus-format model (random
weights: the figures are the machinery's, not a real model's). At each level, N streams
at once, greedy, each MAX_FRAMES frames:

- first packet: `tts_ar`'s request → its first PCM chunk, at the client (mean);
- of which, as `tts_ar` itself timed the same requests (its counters on Triton's metrics
  port): the Talker's part, from the request to the first chunk's frames (1 frame and 2
  of right context, 21 tokens), and Code2Wav's, decoding that window; the connector is
  the rest (gRPC in and out, BLS hops, chunk planning);
- Talker 1st frame: a `talker` request → its first frame of 7 tokens, run apart;
- tokens/s: vLLM's own count of tokens written (Triton's metrics), over the level's run.

Then the same levels guided (GUIDANCE_SCALE, a pair of vLLM requests a stream): their
first packet and tokens/s per stream against the unguided level's, and how many pairs
lost lock-step.

Every level is run `--rounds` times (figures: the mean over rounds), and each stream's
first audio is checked against its whole time, request to end: a first chunk after
LATE_FIRST of it means the audio came in a burst at the end, which a listener hears as
a long silence. The client's own longest stall is reported beside it (perf/tools/host_load.py):
a client that could not run reads late what the server sent in time. `--load N` runs N
CPU-bound processes in a session of their own beside the server, as other services on
the host would (docs/known-limits.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from contract import models as c
from operations.arguments import add_gpu_argument
from operations.environment import AR_VENV, PROJECT_ROOT
from operations.loopback import free_ports, triton_metrics
from operations.supervisor import TritonServer
from operations.triton_client import stream
from perf.tools.host_load import ClientStalls, other_load
from perf.tools.plots import pyplot
from perf.tools.results import save

TEXT = "The birch canoe slid on the smooth planks."
# A stream whose first audio comes after this share of its time (request → end) came late.
LATE_FIRST = 0.6


def _timed_stream(url: str, model: str, values: dict, marks: int) -> tuple[list[float], float]:
    """Seconds from the request to each of its first `marks` responses, and to its last."""
    responses = stream(url, model, values)
    return [r.seconds for r in responses[:marks]], responses[-1].seconds


def _at_once(streams: int, job) -> list:
    with ThreadPoolExecutor(streams) as pool:
        return list(pool.map(job, range(streams)))


COUNTERS = (c.TALKER_TOKENS_METRIC, c.TTS_AR_FIRST_CHUNKS_METRIC, c.TTS_AR_FIRST_FRAMES_METRIC,
            c.TTS_AR_FIRST_DECODE_METRIC, c.TALKER_GUIDANCE_LOST_METRIC)


def _sample(metrics: dict[str, float], name: str) -> float:
    """A metric's value; Prometheus' parser names a counter's sample NAME_total."""
    return metrics.get(name + "_total", metrics.get(name, 0.0))


def measure_level(url: str, metrics_port: int, streams: int, frames: int, guidance: float | None = None) -> dict:
    sampling = {c.TEMPERATURE: np.float32(0), c.MAX_FRAMES: np.int32(frames)}
    if guidance is not None:
        sampling[c.GUIDANCE_SCALE] = np.float32(guidance)

    def talker(i):
        return _timed_stream(url, c.TALKER_MODEL, {c.TEXT: f"{TEXT} {i}", **sampling}, 1)

    def tts_ar(i):
        return _timed_stream(url, c.TTS_AR_MODEL, {c.TEXT: f"{TEXT} {i}", **sampling}, 1)

    talked = _at_once(streams, talker)
    before = triton_metrics(metrics_port)
    start = time.perf_counter()
    with ClientStalls() as stalls:
        spoken = _at_once(streams, tts_ar)
    wall = time.perf_counter() - start
    after = triton_metrics(metrics_port)
    delta = {name: _sample(after, name) - _sample(before, name) for name in COUNTERS}
    per_first_chunk = lambda name: 1000 * delta[name] / delta[c.TTS_AR_FIRST_CHUNKS_METRIC]  # noqa: E731
    first_packet = 1000 * statistics.mean(t[0][0] for t in spoken)
    talker_ms, code2wav_ms = per_first_chunk(c.TTS_AR_FIRST_FRAMES_METRIC), per_first_chunk(c.TTS_AR_FIRST_DECODE_METRIC)
    return {
        "streams": streams,
        "first_packet_ms": first_packet,
        "talker_first_frame_ms": 1000 * statistics.mean(t[0][0] for t in talked),
        "talker_first_chunk_frames_ms": talker_ms,
        "code2wav_ms": code2wav_ms,
        "connector_ms": first_packet - talker_ms - code2wav_ms,
        "tokens_per_s_stream": statistics.median(frames * c.AR_POSITIONS / t[1] for t in spoken),
        "tokens_per_s": delta[c.TALKER_TOKENS_METRIC] / wall,
        "frames_per_s": streams * frames / wall,
        "guidance_lost": int(delta[c.TALKER_GUIDANCE_LOST_METRIC]),
        "first_of_time_max": max(t[0][0] / t[1] for t in spoken),
        "late_first": sum(t[0][0] > LATE_FIRST * t[1] for t in spoken),
        "client_stall_s": stalls.longest_s,
        "rounds": 1,
    }


def merge_rounds(rounds: list[dict]) -> dict:
    """One level's rounds as one row: the mean of each figure, the latest first audio and
    the client's longest stall, and the counts summed."""
    row = {key: statistics.mean(r[key] for r in rounds) for key in rounds[0]}
    for key in ("first_of_time_max", "client_stall_s"):
        row[key] = max(r[key] for r in rounds)
    for key in ("guidance_lost", "late_first", "rounds"):
        row[key] = sum(r[key] for r in rounds)
    row["streams"] = rounds[0]["streams"]
    return row


def measure_rounds(url: str, metrics_port: int, levels: list[int], frames: int, rounds: int,
                   guidance: float) -> tuple[list[dict], list[dict]]:
    """The levels, unguided then guided, `rounds` times over, merged by level."""
    plain: dict[int, list[dict]] = {n: [] for n in levels}
    guided: dict[int, list[dict]] = {n: [] for n in levels}
    for _ in range(rounds):
        for n in levels:
            plain[n].append(measure_level(url, metrics_port, n, frames))
        for n in levels:
            guided[n].append(measure_level(url, metrics_port, n, frames, guidance))
    return [merge_rounds(plain[n]) for n in levels], [merge_rounds(guided[n]) for n in levels]


def in_process_limit(model: Path, levels: list[int], frames: int, gpu: bool) -> dict:
    """perf/ar/limit.py in the AR environment, on the device the server used."""
    command = [str(AR_VENV / "bin" / "python"), "-m", "perf.ar.limit", str(model), "--frames", str(frames),
               "--streams", *map(str, levels), "--device", "cuda" if gpu else "cpu"]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict) -> str:
    limits = {row["streams"]: row for row in results["limit"]["talker"]}
    rows = [
        "| streams | first packet ms | Talker 1st frame ms | of it: Talker (3 frames) ms | Code2Wav ms | connector ms "
        "| tokens/s per stream | tokens/s | limit tokens/s | share of limit | frames/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["levels"]:
        limit = limits[r["streams"]]["tokens_per_s"]
        rows.append(
            f"| {r['streams']} | {r['first_packet_ms']:.0f} | {r['talker_first_frame_ms']:.0f} "
            f"| {r['talker_first_chunk_frames_ms']:.0f} | {r['code2wav_ms']:.0f} | {r['connector_ms']:.0f} "
            f"| {r['tokens_per_s_stream']:.0f} | {r['tokens_per_s']:.0f} | {limit:.0f} | {r['tokens_per_s'] / limit:.2f} "
            f"| {r['frames_per_s']:.1f} |"
        )
    code2wav, fewest = results["limit"]["code2wav"], min(limits)
    rows.append("")
    rows.append(f"In-process limit: Talker first frame {limits[fewest]['first_frame_ms']:.0f} ms at {fewest} "
                f"stream{'s' if fewest > 1 else ''}; "
                f"Code2Wav {code2wav['frames_per_s']:.0f} frames/s whole, a 3-frame window in "
                f"{code2wav['first_window_ms']:.0f} ms. Aggregate tokens/s at {max(limits)} streams against "
                f"{fewest}: {results['batching_gain']:.1f}×.")
    return "\n".join(rows)


def late_first_line(results: dict) -> str:
    """How many streams of 2 and more at once had their first audio late, unguided and guided."""
    rows = [r for r in results["levels"] + results["guided"] if r["streams"] > 1]
    streams = sum(r["streams"] * r["rounds"] for r in rows)
    late = sum(r["late_first"] for r in rows)
    latest = max((r["first_of_time_max"] for r in rows), default=0.0)
    stall = max((r["client_stall_s"] for r in rows), default=0.0)
    load = results.get("load", 0)
    beside = f", with {load} CPU-bound processes of another session beside the server" if load else ""
    return (f"First audio after {LATE_FIRST:.0%} of a stream's time (request → end), at "
            f"{'/'.join(str(r['streams']) for r in results['levels'] if r['streams'] > 1)} streams over "
            f"{sum(r['rounds'] for r in rows)} levels, unguided and guided{beside}: {late} of {streams} streams; "
            f"the latest first audio came at {latest:.2f} of its stream's time. The client's longest stall (time "
            f"it could not run, which delays its reads, not the server's sends): {1000 * stall:.0f} ms.")


def guidance_table(results: dict) -> str:
    """Guided levels against the unguided ones of the same run."""
    plain = {r["streams"]: r for r in results["levels"]}
    rows = [
        f"Guided (scale {results['guidance_scale']:g}): two vLLM requests a stream.",
        "",
        "| streams | first packet ms | ÷ unguided | tokens/s per stream | ÷ unguided | vLLM tokens/s (both rows) "
        "| pairs out of lock-step |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["guided"]:
        p = plain[r["streams"]]
        rows.append(
            f"| {r['streams']} | {r['first_packet_ms']:.0f} | {r['first_packet_ms'] / p['first_packet_ms']:.2f} "
            f"| {r['tokens_per_s_stream']:.0f} | {r['tokens_per_s_stream'] / p['tokens_per_s_stream']:.2f} "
            f"| {r['tokens_per_s']:.0f} | {r['guidance_lost']} |"
        )
    return "\n".join(rows)


def plot(results: dict, path: Path) -> None:
    plt = pyplot()
    levels = results["levels"]
    x = np.arange(len(levels))
    fig, (split, rate) = plt.subplots(1, 2, figsize=(11, 4))
    bottom = np.zeros(len(levels))
    for key, label in (("talker_first_chunk_frames_ms", "Talker (3 frames)"), ("code2wav_ms", "Code2Wav"),
                       ("connector_ms", "connector")):
        values = np.array([max(0.0, r[key]) for r in levels])
        split.bar(x, values, bottom=bottom, label=label)
        bottom += values
    split.set_xticks(x, [str(r["streams"]) for r in levels])
    split.set(xlabel="streams", ylabel="ms", title="first packet, split")
    split.legend()
    limit = {row["streams"]: row["tokens_per_s"] for row in results["limit"]["talker"]}
    rate.plot([r["streams"] for r in levels], [r["tokens_per_s"] for r in levels], "o-", label="server")
    rate.plot(list(limit), list(limit.values()), "s--", label="in-process limit")
    rate.set(xlabel="streams", ylabel="tokens/s (aggregate)", title="Talker throughput")
    rate.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ar-model", type=Path, help="an Orpheus-format model directory (default: the tests' tiny one)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--rounds", type=int, default=5, help="times each level is run")
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--guidance-scale", type=float, default=2.0)
    parser.add_argument("--load", type=int, default=0,
                        help="CPU-bound processes run beside the server, in a session of their own")
    parser.add_argument("--out", type=Path, required=True)
    add_gpu_argument(parser)
    args = parser.parse_args()
    if args.ar_model is None:
        from tests.voices import build_orpheus_model

        args.ar_model = build_orpheus_model()
    args.out.mkdir(parents=True, exist_ok=True)
    http, grpc, metrics = free_ports(3)
    server = TritonServer(http, grpc, metrics, ar_model=str(args.ar_model), gpu=args.gpu)
    with (args.out / "tritonserver.log").open("w") as log:
        server.start(stdout=log)
        try:
            server.wait_ready(timeout=300)
            url = f"127.0.0.1:{grpc}"
            measure_level(url, metrics, 1, 4)  # warm
            with other_load(args.load) if args.load else nullcontext():
                levels, guided = measure_rounds(url, metrics, args.levels, args.frames, args.rounds, args.guidance_scale)
        finally:
            server.stop()
    limit = in_process_limit(args.ar_model, args.levels, args.frames, args.gpu)  # after the server: the cores are free
    rates = {r["streams"]: r["tokens_per_s"] for r in levels}
    results = {"levels": levels, "limit": limit, "frames": args.frames,
               "batching_gain": rates[max(rates)] / rates[min(rates)],
               "guided": guided, "guidance_scale": args.guidance_scale, "load": args.load}
    report = table(results) + "\n\n" + guidance_table(results) + "\n\n" + late_first_line(results)
    save(args.out, "ar", results, report, plot)


if __name__ == "__main__":
    main()
