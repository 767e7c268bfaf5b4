"""The AR benchmark's report (perf/ar.py): its table and plot from measured results."""

from perf.ar import plot, table


def level(streams, tokens):
    return {"streams": streams, "first_packet_ms": 300.0, "talker_first_frame_ms": 90.0,
            "talker_first_chunk_frames_ms": 250.0, "code2wav_ms": 30.0, "connector_ms": 20.0,
            "tokens_per_s_stream": tokens / streams, "tokens_per_s": tokens, "frames_per_s": tokens / 7}


RESULTS = {
    "levels": [level(1, 80.0), level(8, 400.0)],
    "limit": {"talker": [{"streams": 1, "first_frame_ms": 80.0, "tokens_per_s": 100.0},
                         {"streams": 8, "first_frame_ms": 85.0, "tokens_per_s": 500.0}],
              "code2wav": {"frames_per_s": 900.0, "first_window_ms": 12.0}},
    "batching_gain": 5.0,
}


def test_the_table_gives_each_level_its_split_and_its_share_of_the_limit():
    lines = table(RESULTS).splitlines()
    assert lines[2].split("|")[1:-1] == [" 1 ", " 300 ", " 90 ", " 250 ", " 30 ", " 20 ", " 80 ", " 80 ", " 100 ",
                                          " 0.80 ", " 11.4 "]
    assert "| 8 |" in lines[3] and "| 0.80 |" in lines[3]
    assert "5.0×" in lines[-1] and "900 frames/s" in lines[-1]


def test_the_plot_is_written(tmp_path):
    plot(RESULTS, tmp_path / "ar.png")
    assert (tmp_path / "ar.png").stat().st_size > 1000
