"""The voices a server finds in a voices directory, from their configs alone; and the
clear start-up errors for a directory it cannot speak from."""

import json

import pytest

from python_backends import contract as c
from python_backends.catalog import EMBEDDED, VoiceError, find_voices
from python_backends.voice import load_voice
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


def write(directory, name, config):
    (directory / f"{name}.onnx").write_bytes(b"not a model")
    if config is not None:
        (directory / f"{name}.onnx.json").write_text(config if isinstance(config, str) else json.dumps(config))


@pytest.mark.parametrize("config,message", [
    (None, "no x.onnx.json beside it"),
    ("{not json", "cannot read"),
    ({"audio": {}}, "lacks or garbles"),
    ({"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}, "num_speakers": 4}, "4 speakers"),
])
def test_a_voice_the_server_cannot_read_fails_at_start_up_saying_why(tmp_path, config, message):
    write(tmp_path, "x", config)
    with pytest.raises(VoiceError, match=message):
        find_voices(tmp_path)


def test_a_missing_directory_and_a_taken_name_are_refused(tmp_path):
    with pytest.raises(VoiceError, match="not a directory"):
        find_voices(tmp_path / "absent")
    write(tmp_path, c.DEFAULT_VOICE, {"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}})
    with pytest.raises(VoiceError, match="taken by the embedded voice"):
        find_voices(tmp_path)


def test_a_model_that_is_not_a_piper_vits_export_fails_clearly_and_leaves_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEECHSTREAM_CACHE", str(tmp_path / "cache"))
    (tmp_path / "voices").mkdir()
    write(tmp_path / "voices", "x", {"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}})
    with pytest.raises(VoiceError, match="cannot be cut into stages"):
        load_voice(find_voices(tmp_path / "voices")["x"])
    assert list((tmp_path / "cache" / "voices").iterdir()) == []
