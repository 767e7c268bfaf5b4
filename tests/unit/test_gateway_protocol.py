import json

import pytest

from contract import models as c
from gateway import messages as p
from speechstream import protocol as v1

VOICES = ("en_US-joe-medium",)


def parse(frame, max_text_chars=100):
    return p.parse_message(frame, VOICES, max_text_chars)


def test_config_defaults_and_values():
    assert parse('{"type":"config"}') == p.Config("en_US-joe-medium")
    c = parse(json.dumps({"type": "config", "format": "pcm_s16le", "sample_rate": 16000, "frame_ms": 40, "timestamps": True}))
    assert c == p.Config("en_US-joe-medium", "pcm_s16le", 16000, 40, True)


def test_config_queue_is_a_boolean_off_by_default():
    assert parse('{"type":"config","queue":true}').queue and not parse('{"type":"config"}').queue
    with pytest.raises(p.ProtocolError) as refused:
        parse('{"type":"config","queue":"yes"}')
    assert refused.value.code == v1.INVALID_FIELD and "queue" in refused.value.message


def test_config_first_phrase_is_a_boolean_off_by_default():
    assert parse('{"type":"config","first_phrase":true}').first_phrase and not parse('{"type":"config"}').first_phrase
    with pytest.raises(p.ProtocolError) as refused:
        parse('{"type":"config","first_phrase":1}')
    assert refused.value.code == v1.INVALID_FIELD and "first_phrase" in refused.value.message


def test_openai_voice_names_speak_with_the_default_voice():
    assert parse('{"type": "config", "voice": "alloy"}').voice == VOICES[0]
    assert parse('{"type": "config", "voice": "nova"}') == p.Config(VOICES[0])
    with pytest.raises(p.ProtocolError) as refused:
        parse('{"type": "config", "voice": "Alloy"}')  # names are exact
    assert refused.value.code == v1.UNKNOWN_VOICE and "alloy" in refused.value.message


@pytest.mark.parametrize("kind", p.CONTEXT_TYPES)
def test_context_messages(kind):
    m = {"type": kind, "context_id": "c1"} | ({"text": "Hi."} if kind in p.TEXT_TYPES else {})
    parsed = parse(json.dumps(m))
    assert parsed == p.ContextMessage(kind, "c1", m.get("text", ""))


@pytest.mark.parametrize("frame,code", [
    (b"\x00\x01", v1.BINARY_NOT_ACCEPTED),
    ("{nope", v1.INVALID_JSON),
    ("", v1.INVALID_JSON),
    ("[1, 2]", v1.INVALID_MESSAGE),
    ('"speak"', v1.INVALID_MESSAGE),
    ('{"text": "hi"}', v1.MISSING_FIELD),
    ('{"type": 5}', v1.INVALID_FIELD),
    ('{"type": "dance"}', v1.UNKNOWN_TYPE),
    ('{"type": "speak", "text": "hi"}', v1.MISSING_FIELD),
    ('{"type": "speak", "context_id": "c1"}', v1.MISSING_FIELD),
    ('{"type": "speak", "context_id": 7, "text": "hi"}', v1.INVALID_FIELD),
    ('{"type": "speak", "context_id": "c1", "text": ["hi"]}', v1.INVALID_FIELD),
    ('{"type": "speak", "context_id": "", "text": "hi"}', v1.INVALID_FIELD),
    ('{"type": "speak", "context_id": "' + "x" * 65 + '", "text": "hi"}', v1.INVALID_FIELD),
    ('{"type": "speak", "context_id": "c1", "text": "' + "a" * 101 + '"}', v1.TEXT_TOO_LONG),
    ('{"type": "config", "voice": "nobody"}', v1.UNKNOWN_VOICE),
    ('{"type": "config", "format": "mp3"}', v1.UNSUPPORTED_FORMAT),
    ('{"type": "config", "sample_rate": 44100}', v1.INVALID_FIELD),
    ('{"type": "config", "sample_rate": "48000"}', v1.INVALID_FIELD),
    ('{"type": "config", "frame_ms": 25}', v1.INVALID_FIELD),
    ('{"type": "config", "timestamps": 1}', v1.INVALID_FIELD),
    ('{"type": "config", "sample_rate": true}', v1.INVALID_FIELD),
])
def test_malformed_messages_raise_stable_codes(frame, code):
    with pytest.raises(p.ProtocolError) as e:
        parse(frame)
    assert e.value.code == code and e.value.message


def test_errors_carry_the_context_when_known():
    with pytest.raises(p.ProtocolError) as e:
        parse('{"type": "speak", "context_id": "c9", "text": 3}')
    assert e.value.context_id == "c9"
    assert json.loads(p.error(e.value.code, e.value.message, e.value.context_id)) == {
        "type": "error", "context_id": "c9", "code": v1.INVALID_FIELD, "message": e.value.message}


def test_server_messages_omit_absent_fields():
    assert json.loads(p.encode("done", context_id="c1", audio_ms=120)) == {"type": "done", "context_id": "c1", "audio_ms": 120}
    assert "context_id" not in json.loads(p.error(v1.INVALID_JSON, "bad"))


def test_audio_frame_header_round_trips():
    frame = v1.audio_frame(stream=3, seq=70000, sample_offset=2**31 + 5, payload=b"opus", last=True)
    assert len(frame) == 12 + 4 and frame[:2] == b"\x01\x01"
    assert v1.parse_audio_frame(frame) == v1.AudioFrame(3, 70000, 2**31 + 5, True, b"opus")
    assert not v1.parse_audio_frame(v1.audio_frame(1, 0, 0, b"", last=False)).last


def test_telephony_formats_are_8_khz_only():
    assert (parse('{"type":"config","format":"mulaw"}').sample_rate, parse('{"type":"config","format":"alaw"}').sample_rate) == (8000, 8000)
    with pytest.raises(p.ProtocolError) as refused:
        parse('{"type":"config","format":"mulaw","sample_rate":16000}')
    assert refused.value.code == v1.INVALID_FIELD and "8000 Hz only" in refused.value.message
    assert parse('{"type":"config","format":"pcm_s16le","sample_rate":8000}').sample_rate == 8000


def test_sampling_fields_for_the_ar_family_are_checked_and_passed():
    config = parse('{"type":"config","temperature":0,"guidance_scale":3}')
    assert dict(config.voice_params) == {c.TEMPERATURE: 0, c.GUIDANCE_SCALE: 3}
    speak = parse('{"type":"speak","context_id":"a","text":"Hi.","guidance_scale":1.5}')
    assert speak.voice_params == ((c.GUIDANCE_SCALE, 1.5),)
    with pytest.raises(p.ProtocolError) as refused:
        parse('{"type":"speak","context_id":"a","text":"Hi.","temperature":9}')
    assert refused.value.code == v1.INVALID_FIELD and "temperature 9 is out of range" in refused.value.message
