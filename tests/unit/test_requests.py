import numpy as np
import pytest

from contract import models as c
from contract.text import Sentence
from python_backends.inputs import read_chunk_params, read_sentences, read_text
from python_backends.piper.inputs import (
    VoiceParams,
    read_tts_request,
    read_voice_params,
)

DEFAULTS = VoiceParams(1.0, 0.667, 0.8)
LONG = c.MAX_SENTENCE_CHARS + 1  # characters: one too many for a sentence


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
    assert read_voice_params({}).over(DEFAULTS) == DEFAULTS
    p = read_chunk_params({}, c.CHUNK_PARAMS)
    assert (p.initial_frames, p.frames, p.left_context, p.right_context) == tuple(x.default for x in c.CHUNK_PARAMS)


def test_given_parameters_are_used():
    inputs = {c.LENGTH_SCALE: np.array([1.5], np.float32), c.SEED: np.array([9], np.int64)}
    assert read_voice_params(inputs).over(DEFAULTS) == VoiceParams(1.5, 0.667, 0.8, 9)
    assert read_voice_params(inputs).tensors() == {c.LENGTH_SCALE: inputs[c.LENGTH_SCALE], c.SEED: inputs[c.SEED],
                                                   c.SPEAKER: np.array([0], np.int64)}
    assert read_chunk_params({c.CHUNK_FRAMES: np.array([32], np.int32)}, c.CHUNK_PARAMS).frames == 32


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
        read_chunk_params({name: np.array([value], np.int32)}, c.CHUNK_PARAMS)


def test_a_parameter_must_be_a_single_value():
    with pytest.raises(c.InvalidRequest, match="single value"):
        read_chunk_params({c.CHUNK_FRAMES: np.array([8, 8], np.int32)}, c.CHUNK_PARAMS)


def sentences(*values):
    return {c.SENTENCES: np.array([v.encode() if isinstance(v, str) else v for v in values], dtype=object)}


def test_text_is_cut_into_sentences_with_their_spans_in_it():
    got = read_sentences(text(b"Hi there.  How are you?"), 100)
    assert got == (Sentence(0, 9, "Hi there."), Sentence(11, 23, "How are you?"))


def test_each_element_of_sentences_is_one_sentence_spanning_itself():
    got = read_sentences(sentences("Dr. Smith arrived. He sat.", "Then he left"), 100)
    assert got == (Sentence(0, 26, "Dr. Smith arrived. He sat."), Sentence(0, 12, "Then he left"))


@pytest.mark.parametrize("inputs", [{}, text(b"Hi.") | sentences("Hi.")])
def test_exactly_one_of_text_or_sentences(inputs):
    with pytest.raises(c.InvalidRequest, match="exactly one of TEXT .* or SENTENCES"):
        read_sentences(inputs, 100)


@pytest.mark.parametrize("values,message", [
    ((), "SENTENCES is empty"),
    (("Fine.", "  "), r"SENTENCES\[1\] is blank"),
    (("Fine.", b"\xff"), r"SENTENCES\[1\] is not valid UTF-8"),
    (("x" * LONG,), rf"SENTENCES\[0\] has {LONG} characters; the limit is {c.MAX_SENTENCE_CHARS} per sentence"),
    (("x" * 60, "y" * 60), "SENTENCES have 120 characters in all; the limit is 100"),
])
def test_bad_sentences_are_refused_with_a_reason(values, message):
    with pytest.raises(c.InvalidRequest, match=message):
        read_sentences(sentences(*values), 100)


def test_a_tts_request_keeps_the_voice_parameters_as_set_and_notes_a_chosen_first_chunk():
    seed = np.array([7], np.int64)
    request = read_tts_request(sentences("Hi.") | {c.SEED: seed, c.INITIAL_CHUNK_FRAMES: np.array([4], np.int32)}, 100)
    assert request.sentences == (Sentence(0, 3, "Hi."),) and request.params == VoiceParams(seed=7)
    assert request.chunking.initial_frames == 4 and request.chunking_asked
    assert not read_tts_request(text(b"Hi."), 100).chunking_asked


def test_a_tts_request_with_a_voice_parameter_out_of_range_is_refused():
    with pytest.raises(c.InvalidRequest, match="NOISE_W"):
        read_tts_request(sentences("Hi.") | {c.NOISE_W: np.array([9.0], np.float32)}, 100)
