"""Checks python_backends/ar/step_logits.py in the AR environment (torch and triton are not
in the test environment) and prints the figures as JSON for tests/vllm/test_ar_step_logits.py:

    TRITON_INTERPRET=1 .venv-ar/bin/python tests/step_logits_check.py interpret
    .venv-ar/bin/python tests/step_logits_check.py compile

`interpret`: the fused kernel, run by Triton's interpreter on CPU tensors, against the
torch reference on random batches (pairs and single rows mixed, bounds at the
vocabulary's ends) and on an Orpheus-sized step. `compile`: the kernel compiled ahead of
time for NVIDIA GPUs (Triton's own compiler and ptxas; no GPU needed to compile).
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from python_backends.ar import step_logits  # noqa: E402
from python_backends.ar.layouts import NO_TOKEN, Bounds, allowed  # noqa: E402
from python_backends.ar.orpheus import OrpheusTokens  # noqa: E402
from python_backends.ar.step_logits import StepPlan  # noqa: E402

ORPHEUS = OrpheusTokens(base=128_256, eot=128_009).codec  # a real checkpoint's numbering
ORPHEUS_VOCAB = 156_940
TARGETS = {"sm_80": 80, "sm_90": 90}  # A100, H100/H200


def random_bounds(rng: np.random.Generator, vocab: int) -> Bounds:
    """A row's bounds, often at the vocabulary's ends: codes from 0, codes to the last
    entry, no codes at all, an extra token at either end."""
    kind = rng.integers(5)
    if kind == 0:
        return Bounds(0, int(rng.integers(1, vocab)), NO_TOKEN, vocab - 1)
    if kind == 1:
        return Bounds(int(rng.integers(0, vocab)), vocab, 0, NO_TOKEN)
    if kind == 2:
        return Bounds(0, 0, int(rng.integers(vocab)), NO_TOKEN)  # the end token alone
    lo = int(rng.integers(0, vocab))
    hi = int(rng.integers(lo, vocab + 1))
    extras = rng.choice(vocab, 2, replace=False).tolist()
    return Bounds(lo, hi, extras[0], extras[1] if kind == 3 else NO_TOKEN)


def random_plan(rng: np.random.Generator, rows: int, vocab: int) -> StepPlan:
    """Some rows in guided pairs (scale 1 among them), some masked alone, some left alone."""
    order = rng.permutation(rows).tolist()
    pairs = []
    while len(order) >= 4 and rng.random() < 0.6:
        c, u = order.pop(), order.pop()
        pairs.append((c, u, float(rng.choice([1.0, 0.5, 2.0, 3.7]))))
    paired = [row for c, u, _ in pairs for row in (c, u)]
    alone = [row for row in order if rng.random() < 0.7]
    return StepPlan(tuple(pairs), {row: random_bounds(rng, vocab) for row in paired + alone})


def orpheus_plan(rows: int) -> StepPlan:
    """A step of an Orpheus-sized batch: each row at another position of its frame, the
    first two a guided pair."""
    masks = {row: allowed(ORPHEUS, 7 + row).bounds(ORPHEUS) for row in range(rows)}
    masks[1] = masks[0]  # a pair has written the same tokens
    return StepPlan(((0, 1, 2.0),), masks)


def compare(logits: torch.Tensor, plan: StepPlan) -> dict:
    reference, fused = logits.clone(), logits.clone()
    step_logits.apply_torch(reference, plan)
    step_logits.apply_fused(fused, plan)
    kept = torch.isfinite(reference)
    untouched = [row for row in range(logits.shape[0]) if row not in plan.masks]
    exact = [row for c, u, s in plan.pairs if s == 1.0 for row in (c, u)]
    return {
        "rows": logits.shape[0], "vocab": logits.shape[1], "pairs": len(plan.pairs), "masked": len(plan.masks),
        "scale_one_pairs": len(exact) // 2,
        "masks_equal": torch.equal(kept, torch.isfinite(fused)),
        "max_abs_diff": float((reference[kept] - fused[kept]).abs().max()) if kept.any() else 0.0,
        "untouched_equal": torch.equal(fused[untouched], logits[untouched]),
        "scale_one_exact": torch.equal(fused[exact], reference[exact]),
        "changed": not torch.equal(fused, logits),
    }


def cases(device: str, sizes: list[tuple[int, int]]) -> list[dict]:
    """Three random batches of each (rows, vocabulary) size, then an Orpheus-sized step,
    each compared on `device`."""
    rng = np.random.default_rng(0)
    compared = []
    for rows, vocab in sizes:
        for _ in range(3):
            logits = torch.from_numpy(rng.normal(0, 4, (rows, vocab)).astype(np.float32)).to(device)
            compared.append(compare(logits, random_plan(rng, rows, vocab)))
    logits = torch.from_numpy(rng.normal(0, 4, (4, ORPHEUS_VOCAB)).astype(np.float32)).to(device)
    return compared + [compare(logits, orpheus_plan(4))]


def interpret() -> list[dict]:
    return cases("cpu", [(1, 100), (5, 1000), (9, 4099), (16, 3000)])  # 4099: a strip past the last full one


def compile_for_gpus() -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {"logits": "*fp32", "row_stride": "i64", "vocab": "i32", "programs": "*i32", "scales": "*fp32",
                 "table": "*i32", "BLOCK": "constexpr"}
    source = ASTSource(step_logits.step_kernel, signature, constexprs={"BLOCK": step_logits.BLOCK})
    return {name: len(triton.compile(source, target=GPUTarget("cuda", arch, 32)).asm["cubin"])
            for name, arch in TARGETS.items()}


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "interpret" and os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("interpret needs TRITON_INTERPRET=1, set before triton is imported")
    print(json.dumps(interpret() if mode == "interpret" else compile_for_gpus()))
