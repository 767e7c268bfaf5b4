"""One short run of perf.speech.bench against the session's gateway. (The benchmark's pure
parts, without a network: tests/unit/test_bench.py.)"""

import json

from perf.speech import bench
from perf.speech.clients import poisson_arrivals


def test_a_quick_run_against_the_session_gateway(gateway, tmp_path):
    # Listeners at 0.25 C, together and arriving: the session gateway caps an address at 32
    # connections, and C has measured 52 audio-s/s on these 2 cores.
    argv = ["--url", gateway, "--quick", "--skip-peers", "--workloads", "short", "--limit-seconds", "1",
            "--capacity-levels", "0.25", "--arrival-levels", "0.25", "--out", str(tmp_path)]
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
    assert 0 < floor["lone_ms"] < floor["whole_ms"]
    listeners, arriving = results["capacity_runs"]
    assert listeners["of_capacity"] == 0.25 and listeners["level"] == round(0.25 * results["capacity"]["C"])
    assert listeners["errors"] == 0 and 0 < listeners["lsf_ms"]["p50"] <= listeners["lsf_ms"]["p99"]
    assert (arriving["arrivals"], arriving["of_capacity"]) == ("poisson", 0.25)
    assert arriving["level"] == arriving["streams"] == len(poisson_arrivals(arriving["rate_per_s"], bench.QUICK_ARRIVAL_S))
    assert arriving["errors"] == 0 and arriving["throughput_audio_s_per_s"] > 0
    assert "## Listeners at multiples of capacity" in (tmp_path / "bench.md").read_text()
    stages = results["runs"][-1]["triton_stages_cpu_s"]
    # Each model's stubs: the session Triton serves the recognizer too.
    assert set(stages) == {"tritonserver", "tts", "acoustic", "vocoder", "asr"} and stages["vocoder"] > 0
    assert {g["goal"] for g in results["goals"]} >= {"short: TTFP p50 at 1 client (ms)", "short: saturated throughput / compute limit"}
    formats = results["formats"]
    assert set(formats) == {"pcm", "wav", "flac", "opus", "mp3", "aac"} and formats["pcm"]["vs_pcm_ms"] == 0
    assert all(0 < f["min_ms"] <= f["p50_ms"] <= f["max_ms"] < 10_000 and f["rounds"] == 2 for f in formats.values())
    assert "## First audio per HTTP format" in (tmp_path / "bench.md").read_text()
    for name in ("bench.md", "ttfp.png", "throughput.png", "formats.png"):
        assert (tmp_path / name).stat().st_size > 0

