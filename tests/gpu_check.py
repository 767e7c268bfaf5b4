"""Measures the AR family's GPU path in the GPU AR environment (vLLM's CUDA build, made by
`scripts/setup.sh --gpu`) and prints the figures as JSON for tests/vllm/test_gpu.py:

    .venv-ar-gpu/bin/python tests/gpu_check.py MODEL_DIRECTORY

- the fused step kernel against its torch reference on the device (tests/step_logits_check.py's cases);
- Code2Wav's CUDA graphs, one per window bucket, against the same windows decoded on the
  CPU, and its audio left on the device;
- the Talker in process on the GPU (bfloat16, vLLM's CUDA graphs, the fused kernel
  masking each step): every frame valid, greedy decoding repeatable.

Needs an NVIDIA GPU; scripts/gpu-check runs it.
"""

import asyncio
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from python_backends.ar import orpheus  # noqa: E402
from python_backends.ar.code2wav import WINDOW_BUCKETS, Code2WavEngine  # noqa: E402
from python_backends.ar.inputs import TalkerParams  # noqa: E402
from python_backends.ar.talker import TalkerEngine  # noqa: E402
from tests.audio import snr_db  # noqa: E402
from tests.step_logits_check import cases  # noqa: E402

DEVICE = "cuda"
TEXT = "The birch canoe slid on the smooth planks."


def graphs(snac: Path) -> dict:
    """Each window bucket's CUDA graph (a window one frame short of the bucket, so the
    padding is used) against the CPU's decoding of the same padded windows."""
    gpu = Code2WavEngine(snac, device=DEVICE, noise=False)
    cpu = Code2WavEngine(snac, noise=False, buckets=True)
    rng = np.random.default_rng(1)
    snrs, on_device = {}, True
    for frames in WINDOW_BUCKETS:
        windows = rng.integers(0, orpheus.CODEBOOK_SIZE, (3, frames - 1, orpheus.POSITIONS)).astype(np.int32)
        audio = gpu.decode_tensor(torch.from_numpy(windows).to(DEVICE))
        on_device &= audio.is_cuda
        snrs[frames] = snr_db(cpu.decode(windows), audio.cpu().numpy())
    replayed = gpu.decode_tensor(torch.from_numpy(windows).to(DEVICE))  # the last bucket's graph, replayed
    return {
        "graphs": len(gpu._graphs._graphs),  # captured shapes: one per bucket here (a batch of 3 pads to 4)
        "buckets": len(WINDOW_BUCKETS),
        "snr_db_vs_cpu": snrs,
        "replay_equal": bool(torch.equal(replayed, audio)),
        "audio_on_device": bool(on_device),
    }


async def talker(model: Path) -> dict:
    engine = TalkerEngine(model, dtype="bfloat16", eager=False)
    params = TalkerParams(temperature=0.0, max_frames=24)
    try:
        runs = []
        for _ in range(2):
            runs.append(np.concatenate([f async for f in engine.frames(TEXT, "tara", params)]))
        codes_in_range = all(bool(((r >= 0) & (r < orpheus.CODEBOOK_SIZE)).all()) for r in runs)
        return {"frames": [len(r) for r in runs], "codes_in_range": codes_in_range,
                "greedy_repeats": bool(np.array_equal(runs[0], runs[1]))}
    finally:
        engine.shutdown()


if __name__ == "__main__":
    model = Path(sys.argv[1])
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this runs on a GPU host (scripts/gpu-check)")
    figures = {"device": torch.cuda.get_device_name(), "kernel": cases(DEVICE, [(1, 100), (9, 4099), (64, 156_940)]),
               "code2wav": graphs(model / "snac")}
    figures["talker"] = asyncio.run(talker(model / "talker"))
    print(json.dumps(figures))
