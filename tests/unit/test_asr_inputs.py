"""The `asr` model's requests, checked before any of their audio is heard
(python_backends.asr.inputs)."""

import numpy as np
import pytest

from contract import models as c
from python_backends.asr.inputs import MAX_AUDIO_SAMPLES, read_asr_request


def request(**inputs):
    base = {c.STREAM_ID: np.array([b"mic-1"], dtype=object), c.AUDIO: np.zeros(1600, np.int16)}
    return {k: v for k, v in (base | inputs).items() if v is not None}


def test_a_request_is_read_with_its_defaults():
    asked = read_asr_request(request(**{c.AUDIO: np.array([16384, -32768], np.int16)}))
    assert asked.stream_id == "mic-1" and asked.audio.dtype == np.float32
    assert asked.audio.tolist() == [0.5, -1.0]
    assert (asked.end, asked.stop, asked.partials, asked.endpoint_ms) == (False, False, True, 500)


def test_stop_ends_the_utterance_too_and_audio_may_be_left_out():
    asked = read_asr_request(request(**{c.AUDIO: None, c.STOP: np.array([True])}))
    assert asked.end and asked.stop and asked.audio.size == 0


def test_flags_and_endpoint():
    asked = read_asr_request(request(**{c.END: np.array([True]), c.PARTIALS: np.array([False]),
                                        c.ENDPOINT_MS: np.array([800], np.int32)}))
    assert (asked.end, asked.stop, asked.partials, asked.endpoint_ms) == (True, False, False, 800)


@pytest.mark.parametrize("inputs,message", [
    ({c.STREAM_ID: None}, "STREAM_ID is required"),
    ({c.STREAM_ID: np.array([b""], dtype=object)}, "1 to 256 characters"),
    ({c.STREAM_ID: np.array([b"a", b"b"], dtype=object)}, "exactly one"),
    ({c.STREAM_ID: np.array([b"\xff"], dtype=object)}, "UTF-8"),
    ({c.AUDIO: np.zeros(1600, np.float32)}, "INT16"),
    ({c.AUDIO: np.zeros((2, 800), np.int16)}, r"INT16 \[samples\]"),
    ({c.AUDIO: np.zeros(MAX_AUDIO_SAMPLES + 1, np.int16)}, "the limit is 16000 .1000 ms. a request"),
    ({c.ENDPOINT_MS: np.array([50], np.int32)}, "out of range"),
    ({c.END: np.array([True, False])}, "single BOOL"),
])
def test_a_bad_request_is_refused_with_a_reason(inputs, message):
    with pytest.raises(c.InvalidRequest, match=message):
        read_asr_request(request(**inputs))


def test_a_second_of_audio_is_the_most_a_request_holds():
    assert read_asr_request(request(**{c.AUDIO: np.zeros(MAX_AUDIO_SAMPLES, np.int16)})).audio.size == 16000
