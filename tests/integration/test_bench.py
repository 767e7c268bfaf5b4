"""The benchmark's pure parts (numbers from arrival times, WAV and Wyoming parsing, goal
checks, the report) without a network, and one short run of perf.bench against the
session's gateway."""


import json

import pytest

from perf import bench
from perf.clients import poisson_arrivals


def run_row(system, level, ttfp_p50, ttfp_p99, throughput_, stalls=0, gateway_cpu=1.0, triton_cpu=40.0):
    cpu, times = {"client": {"cores": 0.1}, "others": {"cores": 0.0}}, {}
    if system == "speechstream":
        cpu |= {"gateway": {"cpu_s": gateway_cpu, "cores": 0.1}, "triton": {"cpu_s": triton_cpu, "cores": 1.8}}
        times = {"triton_first_response_ms_mean": 20.0, "gateway_ttfp_ms_mean": 30.0}
    else:
        cpu |= {"server": {"cpu_s": 30.0, "cores": 1.9}}
    return {"server_times": times, "audio_s": 10 * throughput_, "system": system, "workload": "paragraph", "level": level, "streams": 24, "errors": 0,
            "ttfp_ms": {"p50": ttfp_p50, "p90": ttfp_p99, "p99": ttfp_p99, "max": ttfp_p99},
            "rtf": {"p50": 0.1, "p90": 0.2, "max": 0.3}, "throughput_audio_s_per_s": throughput_,
            "stalls": stalls, "streams_stalled": min(stalls, 24), "stalled_ms": 10.0 * stalls, "cpu": cpu,
            "ttfp_samples_ms": [ttfp_p50] * 24}


@pytest.fixture
def results():
    return {
        "date": "2026-01-01T00:00:00+00:00", "commit": "abc1234", "command": "python -m perf.bench",
        "machine": {"model": "AMD EPYC", "cores": 2, "loadavg_before": (1.0, 1.0, 1.0), "loadavg_after": (2.0, 1.0, 1.0)},
        "mode": "back to back", "options": {"rounds": 3, "min_streams": 24, "level_seconds": 60.0, "limit_seconds": 10, "listen": False},
        "workloads": ["paragraph"], "levels": [1, 8, 32],
        "limit": {"paragraph": {"cores": 2, "audio_s_per_s": 40.0, "audio_s_per_cpu_s": 20.0, "rtf_one_core_p50": 0.05, "seconds": 10}},
        "limit_runs": [{"paragraph": {"audio_s_per_s": 40.0}}, {"paragraph": {"audio_s_per_s": 35.0}}],
        "runs": [
            run_row("speechstream", 1, 35.0, 60.0, 20.0),
            run_row("speechstream", 8, 60.0, 140.0, 36.0),
            run_row("speechstream", 32, 150.0, 400.0, 35.0, stalls=3, gateway_cpu=3.0),
            run_row("piper-http", 1, 500.0, 600.0, 25.0),
            run_row("piper-http", 8, 3000.0, 5000.0, 30.0),
        ],
    }


def test_a_quick_run_against_the_session_gateway(gateway, tmp_path):
    # Poisson arrivals at 0.25 C: the session gateway caps an address at 32 streams.
    argv = ["--url", gateway, "--quick", "--skip-peers", "--workloads", "short", "--limit-seconds", "1",
            "--arrival-levels", "0.25", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    results = json.loads((tmp_path / "bench.json").read_text())
    assert [(r["system"], r["level"]) for r in results["runs"]] == [("speechstream", 1), ("speechstream", 2)]
    for row in results["runs"]:
        assert row["errors"] == 0 and row["streams"] >= 4
        assert 0 < row["ttfp_ms"]["p50"] <= row["ttfp_ms"]["p99"] < 10_000
        assert 0 < row["rtf"]["p50"] < 5 and row["throughput_audio_s_per_s"] > 0
        assert row["cpu"]["gateway"]["cpu_s"] > 0 and row["cpu"]["triton"]["cpu_s"] > 0
    assert results["limit"]["short"]["audio_s_per_s"] > 0
    limit_cpu = results["limit"]["short"]["cpu_ms_per_audio_s"]
    assert 0 < limit_cpu["acoustic"] < limit_cpu["vocoder"]  # the vocoder is most of the work
    floor = results["ttfp_floor"]["short"]
    assert 0 < floor["pieces_ms"] < floor["whole_ms"] < floor["t_sent_ms"]  # a first packet waits for less than a sentence
    listeners, arriving = results["capacity_runs"]
    assert listeners["of_capacity"] == 0.75 and listeners["level"] == round(0.75 * results["capacity"]["C"])
    assert listeners["errors"] == 0 and 0 < listeners["lsf_ms"]["p50"] <= listeners["lsf_ms"]["p99"]
    assert (arriving["arrivals"], arriving["of_capacity"]) == ("poisson", 0.25)
    assert arriving["level"] == arriving["streams"] == len(poisson_arrivals(arriving["rate_per_s"], bench.QUICK_ARRIVAL_S))
    assert arriving["errors"] == 0 and arriving["throughput_audio_s_per_s"] > 0
    assert "## Listeners at multiples of capacity" in (tmp_path / "bench.md").read_text()
    stages = results["runs"][-1]["triton_stages_cpu_s"]
    assert set(stages) == {"tritonserver", "tts", "acoustic", "vocoder"} and stages["vocoder"] > 0
    assert {g["goal"] for g in results["goals"]} >= {"short: TTFP p50 at 1 client (ms)", "short: saturated throughput / compute limit"}
    formats = results["formats"]
    assert set(formats) == {"pcm", "wav", "flac", "opus", "mp3", "aac"} and formats["pcm"]["vs_pcm_ms"] == 0
    assert all(0 < f["min_ms"] <= f["p50_ms"] <= f["max_ms"] < 10_000 and f["rounds"] == 2 for f in formats.values())
    assert "## First audio per HTTP format" in (tmp_path / "bench.md").read_text()
    for name in ("bench.md", "ttfp.png", "throughput.png", "formats.png"):
        assert (tmp_path / name).stat().st_size > 0

