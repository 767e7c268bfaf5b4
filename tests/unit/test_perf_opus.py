"""perf.opus measures each way of encoding a 48 kHz Opus stream on real speech."""

import numpy as np
import pytest

from perf import opus
from perf.opus import RATE, Way, decode, encode, measure, table, ways


@pytest.fixture(scope="module")
def speech():
    return opus.speech(("short",))  # a sentence in the embedded voice, synthesized in process


def test_the_ways_are_48_khz_and_the_rate_the_server_encodes_a_22050_hz_voice_at():
    assert [(w.encoded_at, w.stream_rate) for w in ways(22050)] == [(48000, 48000), (24000, 48000), (24000, 24000)]
    assert [w.encoded_at for w in ways(44100)][:2] == [48000, 48000]  # a fullband voice stays at 48 kHz


def test_each_way_decodes_at_48_khz_to_the_speechs_length(speech):
    pcm, rate = speech
    for way in ways(rate):
        heard = decode(encode(pcm, rate, way)[0])
        assert abs(heard.size - pcm.size * RATE / rate) <= RATE * 0.02 + 312  # within a frame and the look-ahead


def test_measure_rows_hold_cost_bitrate_and_fidelity_and_the_table_shows_them(speech):
    pcm, rate = speech
    rows = measure(pcm, rate, rounds=1)
    assert [r["way"] for r in rows] == [w.name for w in ways(rate)]
    for r in rows:
        assert r["cpu_ms_per_audio_s"] > 0 and 1.0 <= r["pesq"] <= 4.65 and -1 <= r["correlation"] <= 1
    served, own = rows[1], rows[2]
    assert served["kbps"] > 1.5 * own["kbps"]  # the 48 kHz stream's bitrate, not 24 kHz's own
    assert served["correlation"] > 0.99
    assert table(rows).count("\n") == len(rows) + 1


def test_a_way_encodes_at_its_rate():
    pcm = np.zeros(22050, np.float32)
    packets, _ = encode(pcm, 22050, Way("w", 24000, 48000))
    assert len(packets) == 50  # 1 s of 20 ms frames
