"""Drive the decoupled `tts` model with Triton's perf_analyzer (gRPC streaming).

    python -m perf.perf_analyzer --url 127.0.0.1:8001 --concurrency-range 1:8:2

perf_analyzer 2.51 comes in the tritonclient wheel; it needs libb64 (Debian's
libb64-0d) and libcudart.so.12, taken from the nvidia-cuda-runtime-cu12 wheel.
Extra arguments are passed to perf_analyzer as they are.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

INPUT_DATA = Path(__file__).parent / "tts_input.json"


def environment() -> dict[str, str]:
    import nvidia.cuda_runtime

    cudart = Path(next(iter(nvidia.cuda_runtime.__path__))) / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(cudart), env.get("LD_LIBRARY_PATH")]))
    return env


def command(url: str, concurrency_range: str, export: Path | None, extra: list[str]) -> list[str]:
    cmd = [
        str(Path(sys.executable).parent / "perf_analyzer"),
        "-m", "tts", "-u", url, "-i", "grpc", "--streaming",
        "--input-data", str(INPUT_DATA),
        "--concurrency-range", concurrency_range,
    ]
    if export:
        cmd += ["--profile-export-file", str(export)]
    return cmd + extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8001", help="Triton gRPC address")
    parser.add_argument("--concurrency-range", default="1:4:1")
    parser.add_argument("--export", type=Path, help="perf_analyzer's profile export (JSON, per-response times)")
    args, extra = parser.parse_known_args(argv)
    return subprocess.call(command(args.url, args.concurrency_range, args.export, extra), env=environment())


if __name__ == "__main__":
    sys.exit(main())
