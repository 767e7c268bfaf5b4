"""perf/frameworks/locustfile.py loads the real gateway headless and reports TTFP and underruns."""

import csv
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]
LOCUSTFILE = ROOT / "perf" / "frameworks" / "locustfile.py"
# Locust's own environment (scripts/setup.sh --tests; perf/frameworks/locust-requirements.txt says why).
LOCUST = ROOT / os.environ.get("LOCUST_VENV", ".venv-locust") / "bin" / "locust"


def test_locust_reports_ttfp_total_and_underruns(gateway, tmp_path):
    prefix = tmp_path / "locust"
    cmd = [str(LOCUST), "-f", str(LOCUSTFILE), "--headless", "-u", "2", "-r", "2", "-t", "8s",
           "--host", gateway, "--workload", "short", "--csv", str(prefix), "--only-summary"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = {row["Name"]: row for row in csv.DictReader(f)}
    assert int(rows["ttfp"]["Request Count"]) > 0
    # One of each per utterance, and nothing failed.
    assert rows["ttfp"]["Request Count"] == rows["total"]["Request Count"] == rows["underrun_ms"]["Request Count"]
    assert "speak" not in rows
    assert all(row["Failure Count"] == "0" for row in rows.values())
    assert 0 < float(rows["ttfp"]["Median Response Time"]) <= float(rows["total"]["Median Response Time"])
    assert float(rows["total"]["Average Content Size"]) > 0  # Opus bytes
