"""perf_analyzer (the real binary) drives the streaming `tts` model with perf/'s data, and
the sweep's numbers are read correctly from its profile export."""


from perf.tools import perf_analyzer as pa


def test_sweep_streams_tts(triton, tmp_path):
    # A fixed request count per level: a functional check, not a stable measurement.
    levels = pa.sweep(triton.grpc_url, [1, 2], rounds=2, export_dir=tmp_path, extra=[])
    assert [(x.concurrency, x.requests) for x in levels] == [(1, 2), (2, 4)]
    for level in levels:
        # Every request streamed several chunks, the first in well under the whole utterance.
        assert 0 < level.p50_ms <= level.p90_ms <= level.p99_ms < 10_000
        assert level.responses_per_s >= 2 * level.requests_per_s > 0
    export = pa.parse_export((tmp_path / "tts_c2.json").read_bytes())
    for r in export["experiments"][0]["requests"]:
        times = r["response_timestamps"]
        assert len(times) >= 2 and times[0] < times[-1]
    assert "| 2 | 4 |" in pa.table(levels)

