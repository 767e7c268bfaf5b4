"""The benchmark's pure parts (numbers from arrival times, WAV and Wyoming parsing, goal
checks, the report) without a network, and one short run of perf.speech.bench against the
session's gateway."""

import asyncio
import io
import json
import math
import wave

import pytest

from perf.speech import bench, breakdown
from perf.speech.clients import poisson_arrivals, read_wyoming_event
from perf.speech.goals import goals
from perf.speech.report import markdown
from perf.tools.metrics import (
    Stream,
    WavProgress,
    percentile,
    summarize,
    throughput,
    wav_layout,
)

FRAME = 0.02


def steady(sent: float, first: float, n: int, every: float) -> Stream:
    """n 20 ms frames, the first arriving at `first`, then one every `every` s."""
    return Stream(sent, [(first + i * every, (i + 1) * FRAME) for i in range(n)])


def test_percentile_interpolates_between_ranks_like_numpy():
    values = list(range(1, 11))
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 90) == pytest.approx(9.1)
    assert percentile(values, 99) == pytest.approx(9.91)
    assert percentile([7.0], 99) == 7.0
    assert percentile(list(reversed(values)), 0) == 1


def test_ttfp_rtf_and_audio_of_a_stream():
    s = steady(sent=10.0, first=10.030, n=50, every=0.01)  # 1 s of audio, last frame at 10.52
    assert s.ttfp_s == pytest.approx(0.030)
    assert s.audio_s == pytest.approx(1.0)
    assert s.rtf == pytest.approx(0.52)


def test_stall_free_start_is_the_latest_arrival_against_its_media_time():
    fast = steady(sent=0.0, first=0.1, n=50, every=0.01)  # ahead of real time after the first
    assert fast.stall_free_start_s == pytest.approx(0.1)
    slow = steady(sent=0.0, first=0.1, n=50, every=0.03)  # 30 ms per 20 ms frame: falls behind
    assert slow.stall_free_start_s == pytest.approx(0.1 + 49 * 0.01)  # the last frame, 49 × 10 ms behind
    late = Stream(0.0, [(0.05, 0.02), (0.5, 0.04), (0.51, 1.0)])  # the second frame, due at 0.02 s
    assert late.stall_free_start_s == pytest.approx(0.48)


def test_throughput_is_all_audio_over_the_wall_from_first_send_to_last_audio():
    a = steady(sent=0.0, first=0.1, n=50, every=0.01)  # 1 s of audio, ends at 0.59
    b = steady(sent=0.5, first=0.6, n=100, every=0.01)  # 2 s of audio, ends at 1.59
    assert throughput([a, b]) == pytest.approx(3.0 / 1.59)


def test_a_known_gap_gives_the_known_stalls_and_ttfp_percentiles():
    # Frames every 10 ms (faster than real time), but frame 10 (audio 200-220 ms) comes
    # 300 ms late: it is needed at 0.040 + 0.050 + 0.200 = 0.290 s and arrives at 0.440 s;
    # frame 11 is then needed at 0.440 + 0.020 and came at 0.450: one stall of 150 ms.
    gappy = steady(sent=0.0, first=0.040, n=20, every=0.01)
    gappy.arrivals = [(t + (0.3 if i >= 10 else 0.0), end) for i, (t, end) in enumerate(gappy.arrivals)]
    smooth = steady(sent=0.0, first=0.020, n=20, every=0.01)
    failed = Stream(0.0, error="TimeoutError")
    row = summarize([gappy, smooth, failed])
    assert (row["streams"], row["errors"]) == (3, 1)
    assert row["stalls"] == 1 and row["streams_stalled"] == 1
    assert row["stalled_ms"] == pytest.approx(150.0)
    assert row["stalls_at_s"] == [pytest.approx(0.2)]  # frame 10's audio starts at 200 ms
    assert row["ttfp_ms"]["p50"] == pytest.approx(30.0)
    assert row["ttfp_ms"]["max"] == pytest.approx(40.0)
    assert row["audio_s"] == pytest.approx(0.8)
    assert sorted(row["ttfp_samples_ms"]) == [20.0, 40.0]


def wav_bytes(samples: int, rate: int = 22050) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(2 * samples))
    return buffer.getvalue()


def test_a_wav_body_arriving_in_pieces_gives_audio_ends_from_its_header():
    body = wav_bytes(22050)  # 1 s
    layout = wav_layout(body)
    assert (layout.data_offset, layout.bytes_per_second) == (44, 44100)
    assert wav_layout(body[:30]) is None  # the data chunk's header has not arrived yet
    progress = WavProgress()
    progress.feed(1.0, body[:20])  # header only: no audio yet
    progress.feed(1.1, body[20:44])  # header complete, still no samples
    progress.feed(1.2, body[44 : 44 + 22050])  # half a second
    progress.feed(1.3, body[44 + 22050 :])
    assert progress.arrivals == [(1.2, pytest.approx(0.5)), (1.3, pytest.approx(1.0))]


def test_a_body_that_is_not_a_wav_is_refused():
    with pytest.raises(ValueError):
        wav_layout(b"<html><body>error</body></html>")


def test_wyoming_events_with_inline_data_extra_data_and_payload():
    extra = json.dumps({"width": 2, "channels": 1}).encode()
    header = {"type": "audio-chunk", "data": {"rate": 22050}, "data_length": len(extra), "payload_length": 4}

    async def read_two():
        reader = asyncio.StreamReader()  # of the running loop
        reader.feed_data(json.dumps(header).encode() + b"\n" + extra + b"\x01\x02\x03\x04")
        reader.feed_data(b'{"type": "audio-stop"}\n')
        reader.feed_eof()
        return await read_wyoming_event(reader), await read_wyoming_event(reader)

    chunk, stop = asyncio.run(read_two())
    assert chunk == ("audio-chunk", {"rate": 22050, "width": 2, "channels": 1}, b"\x01\x02\x03\x04")
    assert stop == ("audio-stop", {}, b"")


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
        "date": "2026-01-01T00:00:00+00:00", "commit": "abc1234", "command": "python -m perf.speech.bench",
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


def test_goals_are_checked_against_the_limit_the_best_peer_and_the_gateway_share(results):
    checks = {g["goal"]: g for g in goals(results)}
    assert checks["paragraph: TTFP p50 at 1 client (ms)"]["met"]
    assert checks["paragraph: TTFP p99 at 8 clients (ms)"]["met"]
    assert checks["paragraph: underruns at 8 clients"]["met"]
    assert not checks["paragraph: TTFP p99 at 32 clients (ms)"]["met"]
    assert not checks["paragraph: underruns at 32 clients"]["met"]
    assert checks["paragraph: saturated throughput / compute limit"]["value"] == pytest.approx(0.9)  # 36 of 40
    assert checks["paragraph: saturated throughput / best peer's"]["value"] == pytest.approx(1.2)  # 36 of 30
    # Per CPU-second, at the saturated level: ours 360 audio-s on 1 + 40 CPU-s, the limit
    # 20 audio-s per CPU-s, the peer 300 audio-s on 30 CPU-s.
    assert checks["paragraph: audio-s per server CPU-s / compute limit's"]["value"] == pytest.approx(0.44)
    assert checks["paragraph: audio-s per server CPU-s / best peer's"]["value"] == pytest.approx(0.88)
    share = checks["gateway CPU / Triton CPU, per audio second"]
    assert share["value"] == pytest.approx(5.0 / 120.0, abs=1e-3) and share["met"]


def test_markdown_has_a_row_per_system_workload_and_level_and_the_goal_lines(results):
    results["goals"] = goals(results)
    text = markdown(results)
    assert "AMD EPYC · 2 cores · commit `abc1234`" in text
    rows = [line for line in text.splitlines() if line.startswith("| speechstream") or line.startswith("| piper-http")]
    assert len(rows) == 5
    assert "gw 0.10 + tr 1.80" in rows[0] and "| 20.0 / 30.0 |" in rows[0]
    assert "| – |" in rows[-1]  # a peer: no server-side times
    assert "**missed**: paragraph: underruns at 32 clients" in text
    assert "compute limit, paragraph: **40.0 audio-s/s** on 2 cores, 20.0 audio-s per CPU-s" in text
    assert "the higher of 40.0 and 35.0 audio-s/s" in text
    assert "| 90 / 44 % |" in rows[1]  # 36 of 40 audio-s/s; 8.8 of 20 audio-s per CPU-s


def test_http_formats_are_checked_against_pcm_s_first_audio(results):
    results["formats"] = {fmt: {"p50_ms": 60.0 + extra, "min_ms": 50.0, "max_ms": 90.0 + extra, "vs_pcm_ms": extra,
                                "rounds": 10} for fmt, extra in (("pcm", 0.0), ("opus", 12.0), ("mp3", 45.0))}
    checks = {g["goal"]: g for g in goals(results)}
    assert checks["HTTP opus: first audio - pcm's, p50 at 1 client (ms)"]["met"]
    assert not checks["HTTP mp3: first audio - pcm's, p50 at 1 client (ms)"]["met"]
    results["goals"] = goals(results)
    text = markdown(results)
    assert "| mp3 | 105 | 50 – 135 | +45 | 1.75 |" in text and "| pcm | 60 | 50 – 90 | +0 | 1.00 |" in text


def test_where_the_time_goes_splits_a_first_packet_and_the_cpu_by_stage(results):
    results["ttfp_floor"] = {"paragraph": {"acoustic": 100.0, "prior": 40.0, "head_flow": 15.0, "first_window": 20.0,
                                           "head_frames": 32, "window_frames": 16, "whole_ms": 120.0, "pieces_ms": 75.0,
                                           "lone_ms": 60.0}}
    results["limit"]["paragraph"]["cpu_ms_per_audio_s"] = {"acoustic": 15.0, "vocoder": 35.0}
    first, loaded = results["runs"][0], results["runs"][1]  # 1 client; 8 clients, the saturated level
    first["server_times"] = {"triton_first_response_ms_mean": 90.0, "gateway_ttfp_ms_mean": 93.0}
    first["ttfp_samples_ms"] = [94.0, 96.0]
    loaded["triton_stages_cpu_s"] = {"tritonserver": 0.4, "tts": 0.6, "acoustic": 9.0, "vocoder": 30.0}

    # A lone stream's compute: its head on both cores.
    assert [ms for _, ms in breakdown.ttfp_path(results, "paragraph")] == [60.0, 90.0, 93.0, 95.0]
    # 360 audio-s at 8 clients; the gateway spent 1 CPU-s.
    assert breakdown.stage_costs(results, "paragraph") == [
        ("acoustic", 25.0, 15.0), ("vocoder", 83.3, 35.0), ("tts", 1.7, None), ("tritonserver", 1.1, None), ("gateway", 2.8, None)]
    assert breakdown.machine_scale(results) == pytest.approx(1.25)  # RTF 0.05 here against 0.04
    scaled = breakdown.scaled_goals(results, "paragraph", 1.25)
    assert scaled[0] == "TTFP p50 at 1 client ≤ 62 ms: 35 ms, met"
    assert scaled[1].startswith("8 clients there ≈ 8 here: TTFP p99 ≤ 188 ms") and scaled[1].endswith("met")
    assert scaled[2].startswith("32 clients there ≈ 32 here") and scaled[2].endswith("**missed**")  # 400 ms, 3 stalls
    assert breakdown.peer_goal_against_limit(results, "paragraph").endswith("34.5 audio-s/s, 0.86 × the compute limit of 40.0")
    text = breakdown.section(results)
    assert "| Triton: gRPC, BLS calls between the stubs, scheduling | 30.0 | 90.0 |" in text
    assert "| all | 113.9 | 50.0 |" in text


def test_the_limit_is_the_higher_of_the_runs_before_and_after_the_servers():
    before = {"short": {"audio_s_per_s": 5.0}, "paragraph": {"audio_s_per_s": 9.0}}
    after = {"short": {"audio_s_per_s": 7.0}, "paragraph": {"audio_s_per_s": 8.0}}
    assert bench.best_limit([before, after]) == {"short": after["short"], "paragraph": before["paragraph"]}


def test_quick_is_small_but_keeps_levels_asked_for():
    assert bench.parse_args([]).levels == [1, 2, 4, 8, 16, 32]
    quick = bench.parse_args(["--quick"])
    assert (quick.levels, quick.rounds) == ([1, 2], 1)
    assert bench.parse_args(["--quick", "--levels", "1,4"]).levels == [1, 4]


def test_streams_refused_as_busy_are_counted_apart_from_errors():
    streams = [steady(sent=0.0, first=0.1, n=10, every=0.01), Stream(0.0, error="server_busy"),
               Stream(0.0, error="synthesis_failed")]
    row = summarize(streams)
    assert (row["streams"], row["refused"], row["errors"]) == (3, 1, 1)


def test_refusals_are_timed_from_the_request_and_l_sf_is_summarized():
    refused = [Stream(1.0, error="server_busy", answered=1.0 + ms / 1000) for ms in (20, 40, 300)]
    late = steady(sent=0.0, first=0.1, n=10, every=0.2)  # 20 ms frames every 200 ms: it falls behind
    row = summarize([steady(sent=0.0, first=0.05, n=10, every=0.01), late, *refused])
    assert row["refusal_ms"] == {"p50": 40.0, "p99": pytest.approx(294.8), "max": 300.0}
    assert row["lsf_ms"]["max"] == pytest.approx(late.stall_free_start_s * 1000, abs=0.1)
    assert row["lsf_ms"]["p50"] > 50


def capacity_row(system: str, of_c: float, level: int, refused: int, lsf_p99: float, throughput_: float, stalls: int = 0,
                 arrivals: str = "together"):
    return run_row(system, level, 60.0, 90.0, throughput_, stalls=stalls) | {
        "of_capacity": of_c, "streams": level, "refused": refused, "arrivals": arrivals, "rate_per_s": 1.25,
        "lsf_ms": {"p50": lsf_p99 / 2, "p99": lsf_p99, "max": lsf_p99},
        "refusal_ms": {"p50": 30.0, "p99": 90.0, "max": 100.0} if refused else {"p50": math.nan, "p99": math.nan, "max": math.nan},
    }


def test_listeners_at_multiples_of_c_are_checked_against_t_sent_and_c(results):
    results["capacity"] = {"workload": "paragraph", "C": 40.0, "t_sent_ms": 200.0, "first_packet_ms": 50.0, "cores": 2,
                           "levels": [(0.75, 30), (3.0, 120)]}
    results["runs"][0]["lsf_ms"] = {"p50": 28.0, "p99": 50.0, "max": 60.0}
    results["capacity_runs"] = [
        capacity_row("speechstream", 0.75, 30, 0, 500.0, 28.0),
        capacity_row("speechstream", 3.0, 120, 84, 150.0, 34.0),
        capacity_row("speechstream", 0.75, 75, 3, 250.0, 27.0, arrivals="poisson"),
        capacity_row("piper-http", 3.0, 120, 0, 40_000.0, 30.0, stalls=500),
    ]
    checks = {g["goal"]: g for g in goals(results)}
    assert checks["paragraph: L_sf p50 at 1 client / T_sent"]["value"] == 0.14
    assert checks["paragraph: 0.75 × C listeners: L_sf p99 / T_sent"] == {
        "goal": "paragraph: 0.75 × C listeners: L_sf p99 / T_sent", "value": 2.5, "target": "≤ 3.0", "met": True}
    assert checks["paragraph: 0.75 × C listeners: refused"]["met"]
    assert checks["paragraph: 3 × C listeners: L_sf p99 / T_sent"]["met"]  # 0.75 ≤ 3.0
    poisson = "paragraph: 0.75 × C listeners arriving as a Poisson process"
    assert checks[f"{poisson}: L_sf p99 / T_sent"] | {"goal": None} == {
        "goal": None, "value": 1.25, "target": "≤ 1.0", "met": False}  # arriving one by one, the bar is lower
    assert (checks[f"{poisson}: refused"]["value"], checks[f"{poisson}: refused"]["met"]) == (3, False)
    assert checks["paragraph: 3 × C listeners: slowest refusal (ms)"]["met"]
    admitted = checks["paragraph: 3 × C listeners: admitted throughput / C"]
    assert (admitted["value"], admitted["met"]) == (0.85, True)
    assert not any("piper-http" in name for name in checks)  # the peers are reported, not held to our goals
    results["goals"] = goals(results)
    text = markdown(results)
    assert "C = **40.0 audio-s/s**" in text and "T_sent = **200 ms**" in text
    rows = [line for line in text.splitlines() if line.startswith(("| speechstream | 3 |", "| piper-http | 3 |"))]
    # the start floor: 36 admitted first packets of 50 ms on 2 cores, 900 ms, 4.5 × T_sent
    assert rows[0] == ("| speechstream | 3 | together | 120 | 36 | 84 | 30 / 100 | 75 / 150 | 0.38 / 0.75 | 4.50 | 0 (0) "
                       "| 0 | 0.85 | 0 |")
    assert rows[1].startswith("| piper-http | 3 | together | 120 | 120 | 0 | – | 20000 / 40000 | 100.00 / 200.00 | 15.00 |")
    assert "| speechstream | 0.75 | Poisson, 1.25/s | 75 | 72 | 3 | 30 / 100 | 125 / 250 | 0.62 / 1.25 | – |" in text


def test_capacity_levels_are_listeners_at_multiples_of_the_compute_limit():
    args = bench.parse_args(["--capacity-levels", "0.75,3"])
    floor = {"paragraph": {"t_sent_ms": 180.0, "pieces_ms": 50.0}, "short": {"t_sent_ms": 90.0, "pieces_ms": 40.0}}
    limit = {"short": {"audio_s_per_s": 10.0, "cores": 2}, "paragraph": {"audio_s_per_s": 21.4, "cores": 2}}
    assert bench.capacity_levels(args, limit, floor) == {
        "workload": "paragraph", "C": 21.4, "t_sent_ms": 180.0, "first_packet_ms": 50.0, "cores": 2,
        "levels": [(0.75, 16), (3.0, 64)], "arrival_levels": [0.75]}
    assert bench.capacity_levels(bench.parse_args(["--capacity-levels", ""]), limit, floor)["levels"] == []
    assert bench.capacity_levels(bench.parse_args(["--capacity-levels", "", "--arrival-levels", ""]), limit, floor) is None
    assert bench.parse_args(["--quick"]).capacity_levels == [0.75]  # a smoke run stays below capacity


def test_poisson_arrivals_come_at_their_rate_independently_and_repeatably():
    arrivals = poisson_arrivals(2.0, 1000.0)
    assert arrivals == sorted(arrivals) and 0 < arrivals[0] and arrivals[-1] < 1000.0
    assert len(arrivals) == pytest.approx(2000, rel=0.05)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    # Exponential gaps: mean 1/rate, and as many below the median log(2)/rate as above it.
    assert sum(gaps) / len(gaps) == pytest.approx(0.5, rel=0.05)
    assert sum(g < math.log(2) / 2.0 for g in gaps) / len(gaps) == pytest.approx(0.5, abs=0.03)
    assert poisson_arrivals(2.0, 10.0) == poisson_arrivals(2.0, 10.0) != poisson_arrivals(2.0, 10.0, seed=1)

