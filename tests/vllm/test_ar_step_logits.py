"""The codec Talker's fused per-step kernel (python_backends/ar/step_logits.py) against its
torch reference, checked in the AR environment by tests/step_logits_check.py: run by
Triton's interpreter on CPU tensors (TRITON_INTERPRET=1), and compiled for NVIDIA GPUs
ahead of time. Running it on a GPU is scripts/gpu-check's (tests/gpu/)."""


import pytest

from tests.voices import ar_check


def check(mode: str, **env: str):
    return ar_check("step_logits_check.py", mode, env=env)


@pytest.fixture(scope="module")
def cases():
    return check("interpret", TRITON_INTERPRET="1")


def test_the_cases_mix_pairs_single_rows_and_rows_left_alone(cases):
    assert sum(c["pairs"] for c in cases) >= 5
    assert sum(c["scale_one_pairs"] for c in cases) >= 1
    assert any(c["masked"] < c["rows"] for c in cases)
    assert any(c["vocab"] > 150_000 for c in cases)  # an Orpheus-sized vocabulary


def test_the_kernel_masks_exactly_the_rows_and_tokens_the_reference_masks(cases):
    assert all(c["masks_equal"] for c in cases), [c for c in cases if not c["masks_equal"]]
    assert all(c["untouched_equal"] for c in cases)
    assert all(c["changed"] for c in cases if c["masked"])


def test_the_kernel_merges_guided_pairs_as_the_reference(cases):
    assert max(c["max_abs_diff"] for c in cases) <= 1e-4
    assert all(c["scale_one_exact"] for c in cases)  # at scale 1, the conditional logits bit for bit


def test_the_kernel_compiles_for_nvidia_gpus():
    cubins = check("compile")
    assert cubins.keys() == {"sm_80", "sm_90"} and all(size > 0 for size in cubins.values())
