"""The codec Talker's per-step logits work, timed: the fused Triton kernel against the torch
reference (python_backends/ar/step_logits.py), at batches of 1, 8 and 64 rows of an
Orpheus-sized vocabulary (156,940), half of each batch in guided pairs.

    python -m perf.ar.step_logits --out DIR [--device cuda] [--batches 1 8 64]

It measures in the AR environment (torch; AR_VENV picks which) and reports here: a
table of µs per step and the kernel's ratio to torch, and a plot. The kernel runs on a
GPU only; on a CPU the torch path alone is timed (what the Talker spends per step there).
scripts/gpu-check runs it on a GPU host.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from perf.tools.results import save

VOCAB = 156_940
STEPS = 200


def measure(device: str, batches: list[int]) -> dict:
    """µs per step of each path (after a warm-up), by batch. Runs in the AR environment."""
    import torch

    from python_backends.ar import step_logits
    from python_backends.ar.layouts import allowed
    from python_backends.ar.orpheus import OrpheusTokens

    fmt = OrpheusTokens(base=128_256, eot=128_009).codec
    paths = {"torch": step_logits.apply_torch} | ({"fused": step_logits.apply_fused} if device == "cuda" else {})

    def plan(rows: int) -> step_logits.StepPlan:
        pairs = tuple((r, r + 1, 2.0) for r in range(0, rows // 2 - 1, 2))  # the first half of the rows
        masks = {r: allowed(fmt, 7 + r % 7).bounds(fmt) for r in range(rows)}
        for c, u, _ in pairs:
            masks[u] = masks[c]
        return step_logits.StepPlan(pairs, masks)

    def timed(apply, base, step_plan) -> float:
        """Each step on fresh logits (a copy of `base`), less the copy's own time."""
        logits = base.clone()

        def run(work) -> float:
            for _ in range(10):
                work()
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(STEPS):
                work()
            if device == "cuda":
                torch.cuda.synchronize()
            return 1e6 * (time.perf_counter() - start) / STEPS

        return run(lambda: apply(logits.copy_(base), step_plan)) - run(lambda: logits.copy_(base))

    rows = []
    for batch in batches:
        logits = torch.randn(batch, VOCAB, device=device)
        rows.append({"batch": batch} | {name: timed(apply, logits, plan(batch)) for name, apply in paths.items()})
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return {"device": name, "vocab": VOCAB, "rows": rows}


def table(results: dict) -> str:
    fused = "fused" in results["rows"][0]
    lines = [f"Per-step logits work on {results['device']}, vocabulary {results['vocab']}, half of each batch guided.",
             "", "| batch | torch µs/step |" + (" fused µs/step | fused ÷ torch |" if fused else ""),
             "|---|---|" + ("---|---|" if fused else "")]
    for r in results["rows"]:
        extra = f" {r['fused']:.1f} | {r['fused'] / r['torch']:.2f} |" if fused else ""
        lines.append(f"| {r['batch']} | {r['torch']:.1f} |{extra}")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    from perf.tools.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    batches = [r["batch"] for r in results["rows"]]
    for name in ("torch", "fused"):
        if name in results["rows"][0]:
            ax.plot(batches, [r[name] for r in results["rows"]], "o-", label=name)
    ax.set(xscale="log", yscale="log", xlabel="batch (rows)", ylabel="µs per step",
           title=f"per-step logits work, {results['device']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--measure", action="store_true", help="measure and print JSON (in the AR environment)")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.device, args.batches)))
        return
    from operations.environment import AR_VENV, PROJECT_ROOT

    command = [str(AR_VENV / "bin" / "python"), "-m", "perf.ar.step_logits", "--measure", "--device", args.device,
               "--batches", *map(str, args.batches)]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True)
    if done.returncode:
        sys.exit(done.stderr)
    results = json.loads(done.stdout.splitlines()[-1])
    if args.out:
        save(args.out, "step_logits", results, table(results), plot)
    else:
        print(table(results))


if __name__ == "__main__":
    main()
