"""perf.soak's measuring, in process (no servers): the players' stalls, `resuming`, how
streams ended, the stalls around faults, the report's goals; and perf.soak.chaos's fault sets."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections import Counter

import pytest

from perf.soak import chaos, goals, summary
from perf.soak.__main__ import parse_args
from perf.soak.listener import Listener
from perf.soak.report import results_name, table, write
from perf.soak.tally import ABORTED, CANCELLED, COMPLETED, Failed, Failure, Heard, Tally
from perf.soak.utterance import Utterance
from speechstream import protocol as v1

FRAME_S = 0.02


class Clock:
    """time.monotonic for perf.soak, set by the test."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(time, "monotonic", c)
    return c


def frame(seq: int, last: bool = False) -> bytes:
    return v1.audio_frame(1, seq, seq * 480, b"\0" * 960, last)


def message(kind: str, **fields) -> str:
    return json.dumps({"type": kind, "context_id": "u1", **fields})


def feed(u: Utterance, router, raw: str | bytes):
    return u.handle(router.route(raw))


def test_a_frame_in_time_is_no_stall_and_a_late_one_is_a_stall_of_its_lateness(clock):
    from speechstream.client import Router
    router, u = Router(), Utterance("u1", FRAME_S)
    feed(u, router, message("audio_start", stream=1))
    for seq in range(50):  # one second of audio at once: the player holds it
        feed(u, router, frame(seq))
    clock.now += 1.0 + 0.05 + 2.0  # played out (50 ms lead), then 2 s with nothing to play
    feed(u, router, frame(50))
    assert len(u.stalls) == 1
    stall, resumed = u.stalls[0]
    assert stall.seconds == pytest.approx(2.0) and stall.at == pytest.approx(101.05) and not resumed
    assert u.ahead(clock.now) == pytest.approx(FRAME_S)


def test_a_resume_goes_on_with_the_frames_and_its_gap_is_marked(clock):
    from speechstream.client import Router
    router, u = Router(), Utterance("u1", FRAME_S)
    feed(u, router, message("audio_start", stream=1))
    feed(u, router, frame(0))
    clock.now += 3.0
    assert feed(u, router, message("resuming", code=v1.BACKEND_UNAVAILABLE, message="x", audio_ms=20,
                                   within_ms=10_000)) is None
    clock.now += 4.0
    feed(u, router, frame(1))  # seq goes on
    feed(u, router, frame(2, last=True))
    assert feed(u, router, message("done", audio_ms=60)) == COMPLETED
    assert u.resumings == 1 and u.within_s == 10.0
    [(stall, resumed)] = u.stalls
    assert resumed and stall.seconds == pytest.approx(7.0 - 0.07)


def test_a_resuming_after_the_last_frame_breaks_the_protocol(clock):
    from speechstream.client import Router
    router, u = Router(), Utterance("u1", FRAME_S)
    feed(u, router, message("audio_start", stream=1))
    feed(u, router, frame(0, last=True))
    with pytest.raises(Failure, match="unexpected_resuming"):
        feed(u, router, message("resuming", code=v1.BACKEND_UNAVAILABLE, message="x", audio_ms=20, within_ms=10))


def test_an_error_ends_the_stall_under_way(clock):
    from speechstream.client import Router
    router, u = Router(), Utterance("u1", FRAME_S)
    feed(u, router, message("audio_start", stream=1))
    feed(u, router, frame(0))
    clock.now += 5.0
    with pytest.raises(Failure, match=f"error_{v1.BACKEND_UNAVAILABLE}"):
        feed(u, router, message("error", code=v1.BACKEND_UNAVAILABLE, message="gone"))
    u.stop(clock.now)  # as Listener.utterance does
    assert [round(s.seconds, 2) for s, _ in u.stalls] == [4.93]
    u.stop(clock.now + 1)  # once only
    assert len(u.stalls) == 1


def test_stalls_around_faults_and_elsewhere():
    stalls = [Heard(59.0, 2.0, False),  # under way when the fault at 60 s struck
              Heard(75.0, 0.5, False),  # within 20 s after it
              Heard(81.0, 3.0, False),  # after: elsewhere
              Heard(121.0, 8.0, True)]  # a resume's gap, after the fault at 120 s
    assert [summary.around(s, 60.0) for s in stalls] == [True, True, False, False]
    report = summary.stall_report(stalls, [60.0, 120.0], resume_bound_s=10.0)
    assert report["all"] == {"count": 4, "over_1_5_s": 3, "longest_s": 8.0, "stalled_s": 13.5}
    assert report["around_faults"] == {"count": 3, "over_1_5_s": 2, "longest_s": 8.0}
    assert report["elsewhere"] == {"count": 1, "over_1_5_s": 1, "longest_s": 3.0}
    assert report["resumed"] == {"count": 1, "over_1_5_s": 1, "longest_s": 8.0}
    assert [s["at_s"] for s in report["listed"]] == [59.0, 75.0, 81.0, 121.0]
    assert summary.stall_report([], [])["all"]["longest_s"] == 0.0


def test_streams_done_resumed_errored_hung():
    failures = [
        Failed("error_backend_unavailable", 55.0, 61.0, audio=True, resumed=True),  # past the bound
        Failed("error_backend_unavailable", 59.5, 60.5, audio=False, resumed=False),  # in flight, no audio yet
        Failed("error_backend_unavailable", 62.0, 62.1, audio=False, resumed=False),  # refused: a stage down
        Failed("error_synthesis_failed", 200.0, 203.0, audio=True, resumed=False),  # no fault
        Failed("stalled", 100.0, 130.0, audio=True, resumed=True),
    ]
    tally = Tally(utterances=Counter({COMPLETED: 10, CANCELLED: 2, ABORTED: 1}),
                  errors=Counter({"error_backend_unavailable": 3, "error_synthesis_failed": 1, "stalled": 1,
                                  "connect_failed_OSError": 2}),
                  resumed=Counter({COMPLETED: 4, CANCELLED: 1}), failures=failures)
    assert summary.streams(tally, [60.0, 120.0]) == {
        "started": 18, "done": 13, "resumed_done": 5, "errored": 4,
        "errored_by_kind": {"error_backend_unavailable": 3, "error_synthesis_failed": 1},
        "errored_cut": 2, "errored_cut_resumed": 1, "errored_refused": 1, "errored_other": 1,
        "resumed_errored": 1, "hung": 1, "resumed_hung": 1}
    # With no faults, nothing is cut or refused.
    assert summary.streams(tally)["errored_other"] == 4


def results(which: str | None, stalls: list[Heard], failures: list[Failed] = (), bound: float | None = None) -> dict:
    """A soak's results as perf.soak.run.soak and main make them, with these stalls and failures."""
    tally = Tally(utterances=Counter({COMPLETED: 9}), errors=Counter(f.kind for f in failures), stalls=stalls,
                  resumed=Counter({COMPLETED: 1} if bound else {}), resume_bound_s=bound, failures=list(failures))
    faults = [chaos.Fault(60.0, "kill vocoder stub", 1, 6.5)] if which else []
    args = argparse.Namespace(chaos=which, fault_every=60.0)
    rss = {"after_warmup_mib": 100.0, "end_mib": 100.0, "growth_pct": 0.0}
    return {
        "date": "d", "host": "h", "cpus": 2, "command": "c", "seed": 0, "calibration_s": 25.0, "soak_s": 575.0,
        "warmup_s": 60.0, "capacity_audio_s_per_s": 9.0, "listeners": 5, "host_load": {"median": 3.0, "max": 4.5},
        "utterances": {k: tally.utterances[k] for k in (COMPLETED, CANCELLED, ABORTED)}, "audio_s": 100.0,
        "errors": tally.errors.total(), "errors_by_kind": dict(tally.errors),
        "streams": summary.streams(tally, [f.at_s for f in faults]),
        "stalls": summary.stall_report(stalls, [f.at_s for f in faults], bound),
        "chaos": summary.chaos_report(faults, stalls, args) if which else None,
        "leaked_tts_requests": 0.0, "pending_requests": 0.0, "leaked_shm_segments": 0, "semaphores_left_in_shm": [],
        "gateway_rss": rss,
        "triton_rss": rss, "peak_active_tts_requests": 6.0, "server_log_errors": {"gateway": 0, "triton": 0},
        "triton_stop_s": 2.0, "triton_exit_code": 0, "stubs_left_running": 0, "shm_left_after_exit": 0,
    }


def row(markdown: str, starts: str) -> list[str]:
    [line] = [line for line in markdown.splitlines() if line.startswith(f"| {starts}")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_vocoder_report_counts_stalls_over_1_5_s_against_a_goal_of_0():
    r = results("vocoder", [Heard(61.0, 1.6, False), Heard(300.0, 0.2, False)])
    text = table(r)
    assert row(text, "player stalls")[1:] == ["2; 1; 1.60", "0 over 1.5 s"]
    assert row(text, "stalls around faults")[1:] == ["1; 1; 1.60", "0 over 1.5 s"]
    assert row(text, "stalls elsewhere")[1:] == ["1; 0; 0.20", "0 over 1.5 s"]
    assert "60 s kill vocoder stub: 6.5, 1.60" in row(text, "faults")[1]
    assert "resuming" not in text.split("| streams")[0] and "stalls across" not in text
    assert goals.missed_stall_goal(r)
    assert not goals.missed_stall_goal(results("vocoder", [Heard(61.0, 1.4, False)]))
    assert row(text, "errored: cut by a fault")[1:] == ["0 (0) / 0 / 0", "0 / 0 / 0"]


def test_the_tts_report_bounds_the_gaps_a_resume_left():
    r = results("tts", [Heard(61.0, 7.5, True)], bound=10.0)
    text = table(r)
    assert row(text, "player stalls")[2] == ""  # a resume's gap is no miss
    assert row(text, "stalls across a `resuming`")[1:] == ["1; 7.50", "–; ≤ 10"]
    assert row(text, "streams started")[1:] == ["9 / 9 (1) / 0 / 0", "0 hung"]
    assert row(text, "errored: cut by a fault")[1:] == ["0 (0) / 0 / 0", "0 / – / 0"]
    assert not goals.missed_stall_goal(r) and not goals.missed_errors_goal(r)
    assert goals.missed_stall_goal(results("tts", [Heard(61.0, 10.5, True)], bound=10.0))
    assert goals.missed_stall_goal(results("tts", [Heard(200.0, 2.0, False)], bound=10.0))  # away from a fault


def test_with_tts_faults_a_new_stream_refused_while_a_stage_is_down_is_no_miss():
    refused = Failed("error_backend_unavailable", 61.0, 61.1, audio=False, resumed=False)
    r = results("tts", [], [refused, refused])
    assert row(table(r), "errored: cut by a fault")[1] == "0 (0) / 2 / 0"
    assert not goals.missed_errors_goal(r)
    past_bound = Failed("error_backend_unavailable", 50.0, 76.0, audio=True, resumed=True)
    r = results("tts", [], [refused, past_bound])
    assert row(table(r), "errored: cut by a fault")[1] == "1 (1) / 1 / 0"
    assert goals.missed_errors_goal(r)
    assert goals.missed_errors_goal(results("vocoder", [], [refused]))  # with the vocoder's faults, any error


def test_the_plain_soak_reports_stalls_too():
    text = table(results(None, [Heard(10.0, 0.3, False)]))
    assert row(text, "player stalls")[1:] == ["1; 0; 0.30", "0 over 1.5 s"]
    assert "faults" not in text


def test_each_fault_set_has_a_results_file_of_its_own(tmp_path):
    assert [results_name(w) for w in (None, "all", "vocoder", "tts")] == [
        "soak", "soak-chaos", "soak-chaos-vocoder", "soak-chaos-tts"]
    write(results("tts", [], bound=None), tmp_path)
    assert (tmp_path / "soak-chaos-tts.md").read_text().startswith("# Soak with chaos (tts)")
    assert json.loads((tmp_path / "soak-chaos-tts.json").read_text())["chaos"]["set"] == "tts"


def test_chaos_takes_a_fault_set():
    assert parse_args(["--chaos"]).chaos == "all"
    assert parse_args(["--chaos", "vocoder"]).chaos == "vocoder"
    assert parse_args([]).chaos is None
    with pytest.raises(SystemExit):
        parse_args(["--chaos", "acoustic"])
    names = {k: [f[0] for f in v] for k, v in chaos.FAULT_SETS.items()}
    assert names["vocoder"] == ["kill vocoder stub", "stop vocoder stub for 3 s"]
    assert names["tts"] == ["kill tts stub", "kill acoustic stub", "kill tritonserver"]
    assert set(names["all"]) == set(names["vocoder"]) | set(names["tts"])


class FakeConnection:
    """A server's side of one WebSocket, scripted: (seconds to wait, message) per message
    after the `speak`."""

    def __init__(self, script: list[tuple[float, str | bytes]]) -> None:
        self.script = list(script)
        self.sent: list[dict] = []

    async def send(self, text: str) -> None:
        self.sent.append(json.loads(text))

    async def recv(self) -> str | bytes:
        wait, m = self.script.pop(0)
        await asyncio.sleep(wait)
        return m


def listener(tally: Tally) -> Listener:
    args = argparse.Namespace(cancel=0.0, abort=0.0, seed=0)
    return Listener("ws://unused", random.Random(0), tally, asyncio.Event(), args)


def test_a_listener_hears_a_resumed_stream_through_with_one_gap():
    script = [(0.0, message("audio_start", stream=1)),
              *[(0.0, frame(i)) for i in range(5)],  # 100 ms at once
              (0.4, message("resuming", code=v1.BACKEND_UNAVAILABLE, message="x", audio_ms=100, within_ms=10_000)),
              (0.2, frame(5)), (0.0, frame(6, last=True)), (0.0, message("done", audio_ms=140))]

    async def run() -> tuple[str, bool]:
        tally = Tally()
        outcome = await listener(tally).utterance(FakeConnection(script), FRAME_S)
        return outcome, tally

    (outcome, resumed), tally = asyncio.run(run())
    assert outcome == COMPLETED and resumed
    [heard] = tally.stalls
    assert heard.resumed and 0.4 < heard.seconds < 0.6  # 0.6 s waited, less the 0.15 s of lead and audio
    assert tally.resume_bound_s == 10.0


def test_a_listener_counts_the_silence_before_an_error():
    script = [(0.0, message("audio_start", stream=1)), (0.0, frame(0)),
              (0.5, message("error", code=v1.BACKEND_UNAVAILABLE, message="gone"))]

    async def run() -> tuple[Failure, Tally]:
        tally = Tally()
        with pytest.raises(Failure) as failed:
            await listener(tally).utterance(FakeConnection(script), FRAME_S)
        return failed.value, tally

    failure, tally = asyncio.run(run())
    assert failure.kind == f"error_{v1.BACKEND_UNAVAILABLE}"
    assert failure.failed.audio and not failure.failed.resumed
    assert 0.45 < failure.failed.at_s - failure.failed.spoken_at_s < 0.6
    [heard] = tally.stalls
    assert not heard.resumed and 0.35 < heard.seconds < 0.5


def test_the_results_list_each_failure_but_the_refused():
    failures = [Failed("error_backend_unavailable", 55.0, 61.0, audio=True, resumed=True),
                Failed("error_backend_unavailable", 62.0, 62.1, audio=False, resumed=False),
                Failed("error_synthesis_failed", 200.0, 203.0, audio=True, resumed=False)]
    listed = summary.failures(Tally(failures=failures), [60.0])
    assert [(f["kind"], f["cause"]) for f in listed] == [
        ("error_backend_unavailable", "cut"), ("error_synthesis_failed", "other")]
