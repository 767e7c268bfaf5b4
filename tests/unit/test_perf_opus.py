"""perf.gateway.opus measures each way of encoding a 48 kHz Opus stream on real speech."""

import pytest

from perf.gateway import opus
from perf.gateway.opus import RATE, Way, decode, encode, measure, table, ways
from tests.audio import coded_band_hz


@pytest.fixture(scope="module")
def speech():
    return opus.speech(("short",))  # a sentence in the embedded voice, synthesized in process


def test_the_ways_are_48_khz_the_servers_own_and_a_stream_at_the_rate_it_encodes_a_22050_hz_voice_at():
    assert [(w.stream_rate, w.encoded_at) for w in ways(22050)] == [(48000, 48000), (48000, None), (24000, None)]
    assert ways(44100)[2].stream_rate == 48000  # a fullband voice stays at 48 kHz


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


@pytest.mark.parametrize("encoded_at, band", [(48000, 20000), (None, 12000)])
def test_a_way_encodes_at_its_rate(speech, encoded_at, band):
    pcm, rate = speech
    packets, _ = encode(pcm, rate, Way("w", 48000, encoded_at))
    assert max(coded_band_hz(p) for p in packets) == band  # fullband at 48 kHz, super-wideband at 24
