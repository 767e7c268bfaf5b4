"""The autoregressive family's GPU path, on a host with an NVIDIA GPU: `scripts/gpu-check`
runs these with vLLM's CUDA build in the AR environment (AR_VENV=.venv-ar-gpu). On a
machine without a GPU they are skipped, with that reason; the kernel's CPU checks are
tests/vllm/test_ar_step_logits.py.

- the fused step kernel against its torch reference, on the device;
- Code2Wav's CUDA graphs, one per window bucket, against the CPU's decoding, and its
  audio left on the device;
- the Talker in process on the GPU (bfloat16, CUDA graphs, the kernel masking each step);
- Triton with the GPU configs (`--gpu`): `tts_ar` streams a sentence's audio, the PCM that
  Code2Wav made on the device reaching the BLS in host memory.
"""

import shutil
import subprocess

import numpy as np
import pytest

from contract import models as c
from operations.loopback import free_ports
from operations.supervisor import TritonServer
from operations.triton_client import stream
from python_backends.ar.orpheus import SAMPLES_PER_FRAME
from tests.voices import ar_check, build_orpheus_model


def gpus() -> int:
    """NVIDIA GPUs that nvidia-smi lists here."""
    if shutil.which("nvidia-smi") is None:
        return 0
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return listed.stdout.count("GPU ") if listed.returncode == 0 else 0


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpus(), reason="no NVIDIA GPU here (nvidia-smi lists none): scripts/gpu-check on a GPU host"),
]
SENTENCE = "The birch canoe slid on the smooth planks."


@pytest.fixture(scope="module")
def figures():
    return ar_check("gpu_check.py", str(build_orpheus_model()), timeout=900)


def test_the_fused_kernel_on_the_gpu_masks_and_merges_as_torch(figures):
    cases = figures["kernel"]
    assert all(c["masks_equal"] and c["untouched_equal"] and c["scale_one_exact"] for c in cases), cases
    assert max(c["max_abs_diff"] for c in cases) <= 1e-4


def test_code2wav_replays_a_cuda_graph_per_bucket_as_the_cpu_decodes(figures):
    code2wav = figures["code2wav"]
    assert code2wav["graphs"] == code2wav["buckets"]
    assert code2wav["replay_equal"] and code2wav["audio_on_device"]
    # TF32 convolutions on the GPU against float32 on the CPU: close, not equal.
    assert min(code2wav["snr_db_vs_cpu"].values()) >= 40, code2wav["snr_db_vs_cpu"]


def test_the_talker_on_the_gpu_writes_valid_frames_and_greedy_repeats(figures):
    talker = figures["talker"]
    assert talker["frames"] == [24, 24] and talker["codes_in_range"] and talker["greedy_repeats"]


def test_triton_with_the_gpu_configs_streams_tts_ar(tmp_path):
    http, grpc, metrics = free_ports(3)
    server = TritonServer(http, grpc, metrics, ar_model=str(build_orpheus_model()), gpu=True)
    with (tmp_path / "tritonserver.log").open("w") as log:
        server.start(stdout=log)
        try:
            server.wait_ready(timeout=600)
            chunks = stream(f"127.0.0.1:{grpc}", c.TTS_AR_MODEL,
                            {c.TEXT: SENTENCE, c.MAX_FRAMES: np.int32(20), c.TEMPERATURE: np.float32(0)})
        finally:
            server.stop()
    pcm = np.concatenate([r.get(c.PCM) for r in chunks])
    assert pcm.size == 20 * SAMPLES_PER_FRAME and np.isfinite(pcm).all() and np.abs(pcm).max() > 0
