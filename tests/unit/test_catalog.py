"""The voices a server finds in a voices directory, from their configs alone; and the
clear start-up errors for a directory it cannot speak from."""

import json

import onnx
import pytest

from contract import models as c
from contract.voices import EMBEDDED, VoiceError, find_voices
from python_backends.piper.voice import load_voice
from tests.voices import GERMAN, GERMAN_RATE, build_german_voice


def test_without_a_directory_the_embedded_voice_alone():
    assert find_voices(None) == {c.DEFAULT_VOICE: EMBEDDED}


def test_a_directory_adds_its_voices_after_the_default(tmp_path):
    voices = find_voices(build_german_voice(tmp_path))
    assert list(voices) == [c.DEFAULT_VOICE, GERMAN]
    german = voices[GERMAN]
    assert (german.sample_rate, german.language, german.language_family, german.espeak) == (
        GERMAN_RATE, "de_DE", "de", "de")
    assert german.model == tmp_path / f"{GERMAN}.onnx"


def test_a_multi_speaker_voice_lists_its_speakers_and_refuses_ids_it_lacks(tmp_path):
    config = {"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}, "num_speakers": 3,
              "speaker_id_map": {"ben": 1, "ana": 0}}
    write(tmp_path, "trio", config)
    trio = find_voices(tmp_path)["trio"]
    assert (trio.speakers, trio.speaker_names) == (3, (("ana", 0), ("ben", 1)))
    assert trio.speaker_problem(2) is None
    assert trio.speaker_problem(3) == "speaker 3: voice trio has 3 speakers, 0 to 2"
    assert EMBEDDED.speaker_problem(0) is None
    assert EMBEDDED.speaker_problem(1) == f"speaker 1: voice {EMBEDDED.name} has one speaker, 0"


def write(directory, name, config):
    (directory / f"{name}.onnx").write_bytes(b"not a model")
    if config is not None:
        (directory / f"{name}.onnx.json").write_text(config if isinstance(config, str) else json.dumps(config))


@pytest.mark.parametrize("config,message", [
    (None, "no x.onnx.json beside it"),
    ("{not json", "cannot read"),
    ({"audio": {}}, "lacks or garbles"),
    ({"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}, "num_speakers": 2,
      "speaker_id_map": {"a": 0, "b": 5}}, "num_speakers 2 does not cover"),
])
def test_a_voice_the_server_cannot_read_fails_at_start_up_saying_why(tmp_path, config, message):
    write(tmp_path, "x", config)
    with pytest.raises(VoiceError, match=message):
        find_voices(tmp_path)


def test_a_missing_directory_and_a_taken_name_are_refused(tmp_path):
    with pytest.raises(VoiceError, match="not a directory"):
        find_voices(tmp_path / "absent")
    write(tmp_path, c.DEFAULT_VOICE, {"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}})
    with pytest.raises(VoiceError, match="taken by the embedded or an Orpheus voice"):
        find_voices(tmp_path)


def identity_model() -> bytes:
    """A valid ONNX model without any of Piper's tensors."""
    tensor = onnx.helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1])
    out = onnx.helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [1])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["input"], ["output"])], "g", [tensor], [out])
    return onnx.helper.make_model(graph).SerializeToString()


@pytest.mark.parametrize("model", [b"not a model", identity_model()], ids=["garbage", "onnx"])
def test_a_model_that_is_not_a_piper_vits_export_fails_clearly_and_leaves_no_cache(tmp_path, monkeypatch, model):
    monkeypatch.setenv("SPEECHSTREAM_CACHE", str(tmp_path / "cache"))
    (tmp_path / "voices").mkdir()
    write(tmp_path / "voices", "x", {"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}})
    (tmp_path / "voices" / "x.onnx").write_bytes(model)
    with pytest.raises(VoiceError, match="cannot be cut into stages"):
        load_voice(find_voices(tmp_path / "voices")["x"])
    assert not list((tmp_path / "cache").rglob("x-*"))  # neither graphs nor a staging directory
