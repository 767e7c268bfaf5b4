"""The AR benchmarks' reports (perf/ar/bench.py, perf/ar/step_logits.py): tables and plots."""


from perf.ar.bench import guidance_table, late_first_line, merge_rounds, plot, table
from perf.ar.step_logits import table as step_table


def level(streams, tokens, first_packet=300.0, lost=0, late=0, first_of_time=0.05, rounds=1, stall=0.01):
    return {"streams": streams, "first_packet_ms": first_packet, "talker_first_frame_ms": 90.0,
            "talker_first_chunk_frames_ms": 250.0, "code2wav_ms": 30.0, "connector_ms": 20.0,
            "tokens_per_s_stream": tokens / streams, "tokens_per_s": tokens, "frames_per_s": tokens / 7,
            "guidance_lost": lost, "first_of_time_max": first_of_time, "late_first": late, "rounds": rounds,
            "client_stall_s": stall}


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


def test_rounds_of_a_level_merge_into_means_the_latest_first_audio_and_summed_counts():
    row = merge_rounds([level(4, 200.0, 300.0, lost=1, late=0, first_of_time=0.05, stall=0.4),
                        level(4, 100.0, 500.0, lost=0, late=2, first_of_time=0.8, stall=0.02)])
    assert row["streams"] == 4 and row["rounds"] == 2
    assert row["first_packet_ms"] == 400.0 and row["tokens_per_s"] == 150.0
    assert row["first_of_time_max"] == 0.8 and row["late_first"] == 2 and row["guidance_lost"] == 1
    assert row["client_stall_s"] == 0.4


def test_the_late_first_audio_line_counts_the_streams_of_every_level_past_one_stream():
    results = {"levels": [level(1, 80.0, late=1, first_of_time=0.9), level(4, 200.0, rounds=5),
                          level(8, 300.0, late=3, first_of_time=0.7, rounds=5)],
               "guided": [level(1, 60.0), level(4, 150.0, rounds=5), level(8, 250.0, rounds=5)]}
    line = late_first_line(results)
    # 1 stream's level is left out; 2 × (4 + 8) × 5 streams over 20 levels
    assert "at 4/8 streams over 20 levels" in line and "3 of 120 streams" in line and "at 0.70 of" in line
    assert "beside the server" not in line and "longest stall" in line and ": 10 ms." in line


def test_the_late_first_audio_line_names_the_load_beside_the_server_and_the_clients_worst_stall():
    results = {"levels": [level(4, 200.0, stall=2.5)], "guided": [level(4, 150.0)], "load": 2}
    line = late_first_line(results)
    assert "with 2 CPU-bound processes of another session beside the server" in line and ": 2500 ms." in line


def test_the_step_table_gives_the_kernel_its_ratio_to_torch():
    rows = [{"batch": 1, "torch": 40.0, "fused": 10.0}, {"batch": 64, "torch": 900.0, "fused": 30.0}]
    lines = step_table({"device": "NVIDIA H100", "vocab": 156_940, "rows": rows}).splitlines()
    assert lines[4].split("|")[1:-1] == [" 1 ", " 40.0 ", " 10.0 ", " 0.25 "]
    assert lines[5].split("|")[1:-1] == [" 64 ", " 900.0 ", " 30.0 ", " 0.03 "]

