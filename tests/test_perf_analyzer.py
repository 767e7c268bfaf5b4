"""perf_analyzer (the real binary) can drive the streaming `tts` model with perf/'s data."""

import json
import subprocess

import pytest

from perf import perf_analyzer

pytestmark = pytest.mark.triton


def read_export(path):
    """The profile export copies raw output bytes (PCM, WORDS) into its strings: read it
    leniently, and name the spot when it still is not JSON (seen once in a full run)."""
    raw = path.read_bytes()
    try:
        return json.loads(raw.decode("utf-8", "replace"), strict=False)
    except json.JSONDecodeError as e:
        raise AssertionError(f"{e}; {len(raw)} bytes, near: {raw[max(0, e.pos - 80) : e.pos + 40]!r}") from None


def test_perf_analyzer_streams_tts(triton, tmp_path):
    export = tmp_path / "profile.json"
    # A fixed request count: this is a functional check, not a stable measurement.
    cmd = perf_analyzer.command(triton.grpc_url, "2", export, ["--request-count", "6"])
    run = subprocess.run(cmd, env=perf_analyzer.environment(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Detected decoupled model" in run.stdout
    experiments = read_export(export)["experiments"]
    assert [e["experiment"]["value"] for e in experiments] == [2]
    for e in experiments:
        assert len(e["requests"]) >= 6
        # Every request streamed several chunks, the first well before the last.
        for r in e["requests"]:
            times = r["response_timestamps"]
            assert len(times) >= 2 and times[0] < times[-1]
