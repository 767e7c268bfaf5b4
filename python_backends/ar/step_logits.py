"""The codec Talker's per-step logits work: one plan, two ways to carry it out.

At every decoding step the Talker's logits processor (python_backends.ar.talker) merges
the two rows of each guided pair in lock-step, u + s·(c − u) written into both, and masks
each codec row to the tokens its layout allows next: one position's range of codes, plus
the end or the pad token (python_backends.ar.layouts.allowed). `StepPlan` says what, row
by row; `apply` carries it out:

- `apply_torch`, a few torch operations per row: the reference, and the path on a CPU;
- `apply_fused`, one Triton kernel (`step_kernel`) that reads each row once and writes
  it once, merging and masking in the same pass: on a GPU, where the torch path is a
  chain of memory-bound passes over the whole vocabulary (about 156k entries for an
  Orpheus checkpoint) per step.

`TRITON_INTERPRET=1` runs the kernel on CPU tensors (tests/step_logits_check.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from python_backends.ar.guidance import apply as merge_pairs
from python_backends.ar.layouts import NO_TOKEN, Bounds

BLOCK = 1024  # vocabulary entries per kernel program


@dataclass(frozen=True)
class StepPlan:
    """One step's work: the guided pairs to merge, then each named row's mask. Rows
    named by neither are left as they are."""

    pairs: tuple[tuple[int, int, float], ...]  # (conditional row, unconditional row, scale)
    masks: dict[int, Bounds]  # row → the tokens it may take next


def apply(logits: torch.Tensor, plan: StepPlan) -> torch.Tensor:
    """Carry out `plan` on `logits` [rows, vocabulary] in place: the fused kernel on a GPU,
    torch elsewhere."""
    if logits.is_cuda:
        apply_fused(logits, plan)
    else:
        apply_torch(logits, plan)
    return logits


def apply_torch(logits: torch.Tensor, plan: StepPlan) -> None:
    """The reference: merge each pair, then mask each row, as torch operations."""
    merge_pairs(logits, plan.pairs)
    for row, bounds in plan.masks.items():
        extras = [t for t in (bounds.end, bounds.pad) if t != NO_TOKEN]
        kept = logits[row, extras].clone()
        logits[row, : bounds.lo] = float("-inf")
        logits[row, bounds.hi :] = float("-inf")
        logits[row, extras] = kept


def apply_fused(logits: torch.Tensor, plan: StepPlan) -> None:
    """The same in one kernel launch: a program per pair (its conditional row leads) or
    per masked row outside pairs, times BLOCK-wide strips of the vocabulary."""
    if logits.stride(1) != 1:
        raise ValueError("the fused step needs each row's vocabulary contiguous")
    leads, scales = kernel_programs(plan)
    if not leads:
        return
    rows, vocab = logits.shape
    device = logits.device
    step_kernel[(len(leads), triton.cdiv(vocab, BLOCK))](
        logits, logits.stride(0), vocab,
        torch.tensor(leads, dtype=torch.int32, device=device),
        torch.tensor(scales, dtype=torch.float32, device=device),
        torch.tensor(mask_table(plan, rows, vocab), dtype=torch.int32, device=device),
        BLOCK=BLOCK,
    )


def kernel_programs(plan: StepPlan) -> tuple[list[tuple[int, int]], list[float]]:
    """(row, partner) per kernel program, partner NO_TOKEN outside pairs, and its scale."""
    paired = {row for c, u, _ in plan.pairs for row in (c, u)}
    leads = [(c, u) for c, u, _ in plan.pairs] + [(row, NO_TOKEN) for row in plan.masks if row not in paired]
    scales = [s for _, _, s in plan.pairs] + [1.0] * (len(leads) - len(plan.pairs))
    return leads, scales


def mask_table(plan: StepPlan, rows: int, vocab: int) -> list[Bounds]:
    """Every row's bounds: the whole vocabulary where the plan masks nothing."""
    table = [Bounds(0, vocab, NO_TOKEN, NO_TOKEN)] * rows
    for row, bounds in plan.masks.items():
        table[row] = bounds
    return table


@triton.jit
def _masked(x, cols, table, row):
    """`x` where row `row`'s bounds let column `cols` through, −inf elsewhere."""
    lo = tl.load(table + row * 4)
    hi = tl.load(table + row * 4 + 1)
    end = tl.load(table + row * 4 + 2)
    pad = tl.load(table + row * 4 + 3)
    keep = ((cols >= lo) & (cols < hi)) | (cols == end) | (cols == pad)
    return tl.where(keep, x, float("-inf"))


@triton.jit
def step_kernel(logits, row_stride, vocab, programs, scales, table, BLOCK: tl.constexpr):
    """One strip of one program's rows: read the lead row (and its partner), merge a
    pair as u + s·(c − u) (the conditional row as it is at scale 1), write each row
    masked by its own bounds."""
    program = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < vocab
    row = tl.load(programs + program * 2)
    partner = tl.load(programs + program * 2 + 1)
    x = tl.load(logits + row.to(tl.int64) * row_stride + cols, mask=inside)
    if partner >= 0:
        scale = tl.load(scales + program)
        u = tl.load(logits + partner.to(tl.int64) * row_stride + cols, mask=inside)
        x = tl.where(scale == 1.0, x, u + scale * (x - u))
        tl.store(logits + partner.to(tl.int64) * row_stride + cols, _masked(x, cols, table, partner), mask=inside)
    tl.store(logits + row.to(tl.int64) * row_stride + cols, _masked(x, cols, table, row), mask=inside)
