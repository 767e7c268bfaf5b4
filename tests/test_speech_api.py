import base64
import json

import pytest

from gateway.speech_api import OPENAI_VOICES, ApiError, parse_speech_request, sse_delta, sse_done

VOICES = ("en_US-joe-medium",)


def parse(**body):
    return parse_speech_request(json.dumps(body).encode(), VOICES, 100)


def test_an_openai_request_with_defaults():
    r = parse(model="tts-1", input="Hello there.", voice="alloy")
    assert (r.text, r.voice, r.response_format, r.speed, r.stream_format) == ("Hello there.", VOICES[0], "wav", 1.0, "audio")
    assert (r.frame_format, r.sample_rate, r.content_type) == ("pcm_s16le", 24000, "audio/wav")


@pytest.mark.parametrize("fmt,frames,rate,content_type", [
    ("pcm", "pcm_s16le", 24000, "audio/pcm"),
    ("flac", "pcm_s16le", 24000, "audio/flac"),
    ("opus", "opus", 48000, "audio/ogg"),
])
def test_formats(fmt, frames, rate, content_type):
    r = parse(model="m", input="Hi.", voice=VOICES[0], response_format=fmt, speed=2, stream_format="sse")
    assert (r.frame_format, r.sample_rate, r.length_scale) == (frames, rate, 0.5)
    assert r.content_type == "text/event-stream"
    assert parse(model="m", input="Hi.", voice="nova", response_format=fmt).content_type == content_type


@pytest.mark.parametrize("body,param", [
    ({"input": "Hi.", "voice": "alloy"}, "model"),
    ({"model": "m", "voice": "alloy"}, "input"),
    ({"model": "m", "input": "   ", "voice": "alloy"}, "input"),
    ({"model": "m", "input": "x" * 101, "voice": "alloy"}, "input"),
    ({"model": "m", "input": "Hi."}, "voice"),
    ({"model": "m", "input": "Hi.", "voice": "nobody"}, "voice"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "response_format": "mp3"}, "response_format"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "stream_format": "chunks"}, "stream_format"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "speed": 5}, "speed"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "speed": "fast"}, "speed"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "speed": True}, "speed"),
    ({"model": 3, "input": "Hi.", "voice": "alloy"}, "model"),
])
def test_bad_requests_name_their_field(body, param):
    with pytest.raises(ApiError) as e:
        parse(**body)
    assert e.value.param == param and e.value.status == 400
    assert e.value.body()["error"]["type"] == "invalid_request_error" and e.value.body()["error"]["param"] == param


@pytest.mark.parametrize("raw", [b"{nope", b"[]", b"[" * 100_000])
def test_a_body_that_is_not_a_json_object(raw):
    with pytest.raises(ApiError) as e:
        parse_speech_request(raw, VOICES, 100)
    assert e.value.param is None


def test_server_sent_events():
    event = sse_delta(b"\x00\x01audio")
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    data = json.loads(event[6:])
    assert data["type"] == "speech.audio.delta" and base64.b64decode(data["audio"]) == b"\x00\x01audio"
    assert json.loads(sse_done()[6:]) == {"type": "speech.audio.done"}
    assert "alloy" in OPENAI_VOICES
