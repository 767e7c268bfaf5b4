"""perf.ar.gateway's report: first audio per level, its p50 and p99, and the streams whose
first audio came after LATE_FIRST of their time, and the underruns, counted from the
streams as recorded."""

from perf.ar.bench import LATE_FIRST
from perf.ar.gateway import Stream, summary


def test_the_report_counts_late_first_audio_and_leaves_refused_streams_out_of_the_figures():
    runs = [
        Stream(2, 0, 0, 0.0, first_s=0.3, end_s=3.0),
        Stream(2, 0, 1, 0.0, first_s=0.5, end_s=1.0),  # half its time: not late
        Stream(3, 0, 0, 0.0, first_s=0.4, end_s=2.0, underruns=2),
        Stream(3, 0, 1, 0.0, first_s=2.5, end_s=3.0, underruns=1),  # 0.83 of its time: late
        Stream(3, 0, 2, 0.0, refused="server_busy"),
    ]
    report = summary(runs, stall_s=0.012)
    assert "| 2 | 1 | 2 | 0 | 400 |" in report and "| 3 | 1 | 2 | 1 | 1450 |" in report
    assert report.splitlines()[2].endswith("| 0 (0) |") and report.splitlines()[3].endswith("| 3 (2) |")
    assert "4 streams admitted, 1 refused (server_busy)" in report
    assert f"1 of 4 after {LATE_FIRST:.0%} of their time, the latest at 0.83; underruns 3 (2)" in report
    assert "longest stall: 12 ms" in report
