"""perf_analyzer (the real binary) drives the streaming `tts` model with perf/'s data, and
the sweep's numbers are read correctly from its profile export."""

import pytest

from perf.tools import perf_analyzer as pa

# The export's layout (perf_analyzer 2.51), cut down: timestamps in ns, outputs copied in,
# WORDS with its raw length prefixes, PCM as floats.
EXPORT = (
    b'{"experiments":[{"experiment":{"mode":"concurrency","value":2},"requests":['
    b'{"timestamp":1000000000,"request_inputs":{"TEXT":"a"},'
    b'"response_timestamps":[1030000000,1100000000,1200000000],'
    b'"response_outputs":[{"WORDS":"The\x05\x00\x00\x00birch\xff","PCM":[0.25,-1.5e-7]},{},{}]},'
    b'{"timestamp":1010000000,"request_inputs":{"TEXT":"b"},'
    b'"response_timestamps":[1060000000,1500000000],"response_outputs":[{},{}]},'
    b'{"timestamp":1020000000,"request_inputs":{"TEXT":"c"},'
    b'"response_timestamps":[1120000000,1130000000,1140000000,1900000000],"response_outputs":[{},{},{},{}]}],'
    b'"window_boundaries":[1000000000,3000000000]}],'
    b'"version":"2.51.0","service_kind":"triton","endpoint":""}'
)


def test_parse_export_survives_raw_bytes_and_drops_pcm():
    doc = pa.parse_export(EXPORT)
    request = doc["experiments"][0]["requests"][0]
    assert request["response_outputs"][0]["PCM"] == [None, None]
    assert request["response_timestamps"][0] == 1030000000


def test_parse_export_names_the_spot_when_truncated():
    with pytest.raises(ValueError, match="near"):
        pa.parse_export(EXPORT[:200])


def test_first_response_is_first_timestamp_minus_request_timestamp():
    experiment = pa.parse_export(EXPORT)["experiments"][0]
    assert pa.first_response_ms(experiment) == pytest.approx([30.0, 50.0, 100.0])


def test_summarize_one_level():
    level = pa.summarize(pa.parse_export(EXPORT)["experiments"][0])
    assert (level.concurrency, level.requests) == (2, 3)
    assert level.p50_ms == pytest.approx(50.0)
    assert level.p99_ms == pytest.approx(99.0)  # 50 + 0.98 * 50
    assert level.requests_per_s == pytest.approx(1.5)  # 3 requests in a 2 s window
    assert level.responses_per_s == pytest.approx(4.5)  # 9 responses


def test_duration_without_window_is_first_request_to_last_response():
    experiment = pa.parse_export(EXPORT)["experiments"][0]
    del experiment["window_boundaries"]
    assert pa.duration_s(experiment) == pytest.approx(0.9)


def test_a_level_without_responses_is_an_error():
    experiment = {"experiment": {"value": 1}, "requests": [{"timestamp": 0, "response_timestamps": []}]}
    with pytest.raises(ValueError, match="no request"):
        pa.summarize(experiment)


def test_shared_memory_is_refused_for_models_with_optional_inputs():
    assert pa.shared_memory_args("code2wav", "cuda")[0] == "--shared-memory=cuda"
    assert pa.shared_memory_args("tts", "none") == []
    with pytest.raises(ValueError, match="optional inputs.*--model code2wav"):
        pa.shared_memory_args("tts_ar", "system")

