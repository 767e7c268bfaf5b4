import numpy as np
import pytest

from python_backends import contract as c
from python_backends.engines import VoiceParams
from python_backends.requests import read_chunk_params, read_text, read_voice_params

DEFAULTS = VoiceParams(1.0, 0.667, 0.8)


def text(value):
    return {c.TEXT: np.array([value], dtype=object)}


def test_text_is_decoded():
    assert read_text(text("héllo".encode()), 100) == "héllo"


@pytest.mark.parametrize("value,message", [
    (b"", "empty"), (b"  \n\t", "empty"), (b"\xff\xfe", "UTF-8"), (b"x" * 101, "limit is 100"),
])
def test_bad_text_is_refused_with_a_reason(value, message):
    with pytest.raises(c.InvalidRequest, match=message):
        read_text(text(value), 100)


def test_text_is_required():
    with pytest.raises(c.InvalidRequest, match="TEXT is required"):
        read_text({}, 100)


def test_text_must_be_one_string():
    with pytest.raises(c.InvalidRequest, match="exactly one"):
        read_text({c.TEXT: np.array([b"a", b"b"], dtype=object)}, 100)


def test_absent_parameters_take_defaults():
    assert read_voice_params({}, DEFAULTS) == DEFAULTS
    p = read_chunk_params({})
    assert (p.initial_frames, p.frames, p.left_context, p.right_context) == tuple(x.default for x in c.CHUNK_PARAMS)


def test_given_parameters_are_used():
    inputs = {c.LENGTH_SCALE: np.array([1.5], np.float32), c.SEED: np.array([9], np.int64)}
    assert read_voice_params(inputs, DEFAULTS) == VoiceParams(1.5, 0.667, 0.8, 9)
    assert read_chunk_params({c.CHUNK_FRAMES: np.array([32], np.int32)}).frames == 32


@pytest.mark.parametrize("name,value", [
    (c.LENGTH_SCALE, 0.0), (c.LENGTH_SCALE, 10.0), (c.LENGTH_SCALE, float("nan")),
    (c.NOISE_SCALE, -1.0), (c.NOISE_W, 3.0), (c.SEED, -1),
])
def test_out_of_range_voice_parameters_are_refused(name, value):
    dtype = np.int64 if name == c.SEED else np.float32
    with pytest.raises(c.InvalidRequest, match=name):
        read_voice_params({name: np.array([value], dtype)}, DEFAULTS)


@pytest.mark.parametrize("name,value", [
    (c.INITIAL_CHUNK_FRAMES, 0), (c.CHUNK_FRAMES, 1000), (c.LEFT_CONTEXT_FRAMES, -1), (c.RIGHT_CONTEXT_FRAMES, 65),
])
def test_out_of_range_chunk_parameters_are_refused(name, value):
    with pytest.raises(c.InvalidRequest, match=name):
        read_chunk_params({name: np.array([value], np.int32)})


def test_a_parameter_must_be_a_single_value():
    with pytest.raises(c.InvalidRequest, match="single value"):
        read_chunk_params({c.CHUNK_FRAMES: np.array([8, 8], np.int32)})
