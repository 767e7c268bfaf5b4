"""The AR benchmark's report (perf/ar.py): its table and plot from measured results."""

from perf.ar import guidance_table, plot, table


def level(streams, tokens, first_packet=300.0, lost=0):
    return {"streams": streams, "first_packet_ms": first_packet, "talker_first_frame_ms": 90.0,
            "talker_first_chunk_frames_ms": 250.0, "code2wav_ms": 30.0, "connector_ms": 20.0,
            "tokens_per_s_stream": tokens / streams, "tokens_per_s": tokens, "frames_per_s": tokens / 7,
            "guidance_lost": lost}


RESULTS = {
    "levels": [level(1, 80.0), level(8, 400.0)],
    "limit": {"talker": [{"streams": 1, "first_frame_ms": 80.0, "tokens_per_s": 100.0},
                         {"streams": 8, "first_frame_ms": 85.0, "tokens_per_s": 500.0}],
              "code2wav": {"frames_per_s": 900.0, "first_window_ms": 12.0}},
    "batching_gain": 5.0,
    "guided": [level(1, 60.0, 330.0), level(8, 200.0, 600.0, lost=1)],
    "guidance_scale": 2.0,
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


def test_the_guided_table_compares_each_level_with_the_unguided_one():
    lines = guidance_table(RESULTS).splitlines()
    assert lines[0].startswith("Guided (scale 2)")
    assert lines[4].split("|")[1:-1] == [" 1 ", " 330 ", " 1.10 ", " 60 ", " 0.75 ", " 60 ", " 0 "]
    assert lines[5].split("|")[1:-1] == [" 8 ", " 600 ", " 2.00 ", " 25 ", " 0.50 ", " 200 ", " 1 "]
