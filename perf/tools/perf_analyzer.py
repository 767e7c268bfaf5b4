"""A concurrency sweep of a synthesis model with Triton's perf_analyzer: the decoupled `tts`
or `tts_ar` (gRPC streaming), or the AR family's batched `code2wav`.

    python -m perf.tools.perf_analyzer --url 127.0.0.1:8001 --concurrency 1,2,4,8 --output perf/results/speech/perf_analyzer.md
    python -m perf.tools.perf_analyzer --model tts_ar --concurrency 1,4,8
    python -m perf.tools.perf_analyzer --model code2wav --shared-memory cuda   # on a GPU host

`--shared-memory system|cuda` puts inputs and outputs in shared memory regions (CUDA:
on the GPU, where Code2Wav's GPU config keeps them). perf_analyzer 2.51 supports it
only for models without optional inputs: `code2wav`, not `tts` or `tts_ar`.

For each level, perf_analyzer sends a fixed number of requests (`--rounds` per concurrent
stream: this shared machine may never reach perf_analyzer's stable measurement) and
writes its profile export; the table's first-response latency comes from that export
(per request, first response timestamp minus request timestamp), because perf_analyzer
2.51's own "latency" for a decoupled model is that of the last response, i.e. the whole
utterance, despite what it prints.

perf_analyzer 2.51 comes in the tritonclient wheel; it needs libb64 (Debian's
libb64-0d) and libcudart.so.12, taken from the nvidia-cuda-runtime-cu12 wheel.
Extra arguments are passed to perf_analyzer as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from contract import models as c
from perf.tools.metrics import percentile
from python_backends.ar.orpheus import SAMPLES_PER_FRAME

INPUT_DATA = Path(__file__).parent / "tts_input.json"
AR_INPUT_DATA = Path(__file__).parent / "tts_ar_input.json"  # the texts, 48 frames each (perf/ar/bench.py's)
CODE2WAV_WINDOW = 20  # frames: the largest window tts_ar sends (16 + 2 + 2 of context)
# What perf_analyzer sends each model: the texts to the streaming models, windows of
# zeros (valid codes) to code2wav.
MODEL_INPUTS = {
    "tts": ["--streaming", "--input-data", str(INPUT_DATA)],
    "tts_ar": ["--streaming", "--input-data", str(AR_INPUT_DATA)],
    "code2wav": ["--input-data", "zero", "--shape", f"CODES:{CODE2WAV_WINDOW},{c.AR_POSITIONS}"],
}
NS = 1e9
# Named, not left for perf_analyzer to infer: unnamed, it picks the version whose server
# statistics grew during the run, and Triton counts a decoupled request when it releases
# it, which can come after its final response reached perf_analyzer; on a loaded host none
# had grown yet ("failed to find the requested model version", seen in CI).
MODEL_VERSION = "1"


@dataclass(frozen=True)
class Level:
    """One concurrency level's numbers: latencies in ms, rates per second."""

    concurrency: int
    requests: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    requests_per_s: float
    responses_per_s: float


def environment() -> dict[str, str]:
    import nvidia.cuda_runtime

    cudart = Path(next(iter(nvidia.cuda_runtime.__path__))) / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(cudart), env.get("LD_LIBRARY_PATH")]))
    return env


def shared_memory_args(model: str, kind: str) -> list[str]:
    """perf_analyzer's shared-memory options for `model` (kind none, system or cuda)."""
    if kind == "none":
        return []
    if model != c.CODE2WAV_MODEL:
        raise ValueError(f"--shared-memory {kind}: perf_analyzer 2.51 refuses shared memory for models with optional "
                         f"inputs, which {model} has; use it with --model {c.CODE2WAV_MODEL}")
    pcm_bytes = CODE2WAV_WINDOW * SAMPLES_PER_FRAME * 4  # one window's float32 PCM
    return [f"--shared-memory={kind}", f"--output-shared-memory-size={pcm_bytes}"]


def command(url: str, model: str, concurrency: int, request_count: int, export: Path, extra: list[str]) -> list[str]:
    """One level per run: perf_analyzer refuses --request-count with a concurrency range."""
    return [
        str(Path(sys.executable).parent / "perf_analyzer"),
        "-m", model, "-x", MODEL_VERSION, "-u", url, "-i", "grpc", *MODEL_INPUTS[model],
        "--concurrency-range", str(concurrency),
        "--request-count", str(request_count),
        "--profile-export-file", str(export),
        *extra,
    ]


def parse_export(raw: bytes) -> dict:
    """The profile export copies raw output bytes (WORDS) into its strings and every PCM
    sample as a JSON number: decode leniently, drop the floats (only timestamps, which are
    integers, are read; this keeps a many-megabyte export small in memory), and name the
    spot when it still is not JSON."""
    try:
        return json.loads(raw.decode("utf-8", "replace"), strict=False, parse_float=lambda _: None)
    except json.JSONDecodeError as e:
        raise ValueError(f"profile export is not JSON: {e}; {len(raw)} bytes, near {raw[max(0, e.pos - 80) : e.pos + 40]!r}") from None


def first_response_ms(experiment: dict) -> list[float]:
    """Per request that got a response: its first response's time after the request, in ms."""
    return [(r["response_timestamps"][0] - r["timestamp"]) / 1e6 for r in experiment["requests"] if r["response_timestamps"]]


def duration_s(experiment: dict) -> float:
    """The measurement window, or first request to last response where the export has none."""
    if bounds := experiment.get("window_boundaries"):
        return (bounds[-1] - bounds[0]) / NS
    requests = experiment["requests"]
    last = max(t for r in requests for t in r["response_timestamps"] or [r["timestamp"]])
    return (last - min(r["timestamp"] for r in requests)) / NS


def summarize(experiment: dict) -> Level:
    latencies = first_response_ms(experiment)
    if not latencies:
        raise ValueError(f"no request got a response at {experiment['experiment']}")
    seconds = duration_s(experiment)
    responses = sum(len(r["response_timestamps"]) for r in experiment["requests"])
    return Level(
        concurrency=experiment["experiment"]["value"],
        requests=len(latencies),
        p50_ms=percentile(latencies, 50),
        p90_ms=percentile(latencies, 90),
        p99_ms=percentile(latencies, 99),
        requests_per_s=len(latencies) / seconds,
        responses_per_s=responses / seconds,
    )


def table(levels: list[Level]) -> str:
    lines = [
        "| concurrency | requests | first response p50 ms | p90 ms | p99 ms | requests/s | responses/s |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {x.concurrency} | {x.requests} | {x.p50_ms:.1f} | {x.p90_ms:.1f} | {x.p99_ms:.1f} | {x.requests_per_s:.2f} | {x.responses_per_s:.1f} |"
        for x in levels
    ]
    return "\n".join(lines)


def run_level(url: str, model: str, concurrency: int, rounds: int, export_dir: Path, extra: list[str],
              attempts: int = 2) -> Level:
    """One level. perf_analyzer 2.51 now and then exits 0 with its export cut at a 1 MiB
    write-buffer boundary (seen once in the test suite): such a level is run again."""
    for _ in range(attempts - 1):
        try:
            return summarize(parse_export(profile_export(url, model, concurrency, rounds, export_dir, extra))["experiments"][0])
        except ValueError as e:
            print(f"perf_analyzer at concurrency {concurrency}: {e}; running the level again", file=sys.stderr, flush=True)
    return summarize(parse_export(profile_export(url, model, concurrency, rounds, export_dir, extra))["experiments"][0])


def profile_export(url: str, model: str, concurrency: int, rounds: int, export_dir: Path, extra: list[str]) -> bytes:
    """The raw profile export of one perf_analyzer run at `concurrency`."""
    export = export_dir / f"{model}_c{concurrency}.json"
    export.unlink(missing_ok=True)  # perf_analyzer refuses an existing export path
    cmd = command(url, model, concurrency, rounds * concurrency, export, extra)
    run = subprocess.run(cmd, env=environment(), capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"perf_analyzer exited {run.returncode} at concurrency {concurrency}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    return export.read_bytes()


def sweep(url: str, levels: list[int], rounds: int, export_dir: Path, extra: list[str], model: str = c.TTS_MODEL,
          shared_memory: str = "none") -> list[Level]:
    extra = shared_memory_args(model, shared_memory) + extra
    results = []
    for concurrency in levels:
        results.append(run_level(url, model, concurrency, rounds, export_dir, extra))
        print(table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)  # progress
    return results


def main(argv: list[str] | None = None) -> int:
    # No abbreviations: unknown options go to perf_analyzer as they are.
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--url", default="127.0.0.1:8001", help="Triton gRPC address")
    parser.add_argument("--model", choices=list(MODEL_INPUTS), default=c.TTS_MODEL)
    parser.add_argument("--shared-memory", choices=["none", "system", "cuda"], default="none",
                        help=f"inputs and outputs through shared memory ({c.CODE2WAV_MODEL} only)")
    parser.add_argument("--concurrency", default="1,2,4,8", help="comma-separated levels")
    parser.add_argument("--rounds", type=int, default=4, help="requests per concurrent stream, per level")
    parser.add_argument("--export-dir", type=Path, help="keep perf_analyzer's profile exports here (large: PCM as JSON)")
    parser.add_argument("--output", type=Path, help="also write the table here (Markdown)")
    args, extra = parser.parse_known_args(argv)
    try:
        shared_memory_args(args.model, args.shared_memory)
    except ValueError as e:
        parser.error(str(e))
    levels = [int(x) for x in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        export_dir = args.export_dir or Path(scratch)
        export_dir.mkdir(parents=True, exist_ok=True)
        result = table(sweep(args.url, levels, args.rounds, export_dir, extra, args.model, args.shared_memory))
    print(result)
    if args.output:
        args.output.write_text(result + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
