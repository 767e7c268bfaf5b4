"""The AR family's in-process limit: the same Talker and Code2Wav the server runs, with
nothing in the way (no Triton, no BLS, no gRPC): vLLM's AsyncLLM streaming N requests at
once, and SNAC decoding the frames whole. Runs in the AR environment; prints JSON.

    .venv-ar/bin/python -m perf.ar.limit MODEL_DIR --streams 1 4 8 --frames 48 [--device cuda]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import numpy as np

from python_backends.ar.code2wav import Code2WavEngine
from python_backends.ar.inputs import TalkerParams
from python_backends.ar.talker import TalkerEngine

TEXT = "The birch canoe slid on the smooth planks."


async def talker_level(engine: TalkerEngine, streams: int, frames: int) -> dict:
    """`streams` requests at once, each `frames` frames, greedy: first-frame times and
    tokens/s, per stream and in aggregate."""
    params = TalkerParams(temperature=0.0, max_frames=frames)

    async def one(i: int) -> tuple[float, float, int]:
        start, first, count = time.perf_counter(), None, 0
        async for new in engine.frames(f"{TEXT} {i}", "tara", params):
            first = first or time.perf_counter() - start
            count += len(new)
        return first, time.perf_counter() - start, count

    start = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(streams)))
    wall = time.perf_counter() - start
    positions = engine.tokens.codec.positions
    return {
        "streams": streams,
        "first_frame_ms": 1000 * float(np.median([r[0] for r in results])),
        "tokens_per_s_stream": float(np.median([r[2] * positions / r[1] for r in results])),
        "tokens_per_s": sum(r[2] for r in results) * positions / wall,
        "frames_per_s": sum(r[2] for r in results) / wall,
    }


def code2wav_rate(directory: Path, frames: int, device: str, rounds: int = 5) -> dict:
    """Frames decoded per second, whole windows of `frames`, and a 3-frame window's time."""
    engine = Code2WavEngine(directory, device=device)
    codes = np.random.default_rng(0).integers(0, 4096, (1, frames, 7))
    engine.decode(codes)  # warm
    start = time.perf_counter()
    for _ in range(rounds):
        engine.decode(codes)
    whole = (time.perf_counter() - start) / rounds
    start = time.perf_counter()
    for _ in range(rounds):
        engine.decode(codes[:, :3])
    return {"frames_per_s": frames / whole, "first_window_ms": 1000 * (time.perf_counter() - start) / rounds}


async def measure(model: Path, levels: list[int], frames: int, device: str) -> dict:
    gpu = device == "cuda"  # then as the server's configs/gpu.pbtxt: bfloat16 and CUDA graphs
    engine = TalkerEngine(model / "talker", dtype="bfloat16" if gpu else "float32", eager=not gpu)
    try:
        await talker_level(engine, 1, 4)  # warm
        talker = [await talker_level(engine, n, frames) for n in levels]
    finally:
        engine.shutdown()
    return {"talker": talker, "code2wav": code2wav_rate(model / "snac", frames, device)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--device", default="cpu", help="Code2Wav's (the Talker's is vLLM's build's: cpu or cuda)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.model, args.streams, args.frames, args.device))))


if __name__ == "__main__":
    main()
