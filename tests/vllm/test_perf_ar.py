"""The AR benchmarks' reports (perf/ar/bench.py, perf/ar/step_logits.py): tables and plots."""

import json
import subprocess
import sys

from tests.voices import ROOT


def test_the_step_benchmark_times_the_torch_path_on_a_cpu_and_reports_it(tmp_path):
    """perf/ar/step_logits.py end to end on this machine: the kernel needs a GPU, so the CPU
    report has the torch path alone (scripts/gpu-check runs it on a GPU)."""
    run = subprocess.run([sys.executable, "-m", "perf.ar.step_logits", "--batches", "1", "8", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    results = json.loads((tmp_path / "step_logits.json").read_text())
    assert [r["batch"] for r in results["rows"]] == [1, 8] and all(isinstance(r["torch"], float) for r in results["rows"])
    assert "fused" not in results["rows"][0] and results["device"] == "cpu"
    assert "| 8 |" in run.stdout and (tmp_path / "step_logits.png").stat().st_size > 0

