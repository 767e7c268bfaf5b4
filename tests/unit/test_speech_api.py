import base64
import io
import json
import wave

import av
import numpy as np
import pytest
import soundfile
from multidict import CIMultiDict

from contract.models import (
    DEFAULT_VOICE,
    GUIDANCE_SCALE,
    LENGTH_SCALE,
    NOISE_W,
    SEED,
    TEMPERATURE,
)
from contract.voices import EMBEDDED_ONLY
from gateway.messages import OPENAI_VOICES
from gateway.protocols.speech_api import (
    ApiError,
    SpeechBody,
    parse_speech_request,
    sse_delta,
    sse_done,
    streams_by_default,
)
from tests.unit.test_gateway_containers import (
    UNKNOWN_WAV_SIZE,
    flac_total_samples,
    riff_sizes,
)

VOICES = EMBEDDED_ONLY


def parse(**body):
    return parse_speech_request(json.dumps(body).encode(), VOICES, 100)


def test_an_openai_request_with_defaults():
    r = parse(model="tts-1", input="Hello there.", voice="alloy")
    assert (r.text, r.voice, r.response_format, r.speed, r.stream_format) == ("Hello there.", DEFAULT_VOICE, "mp3", 1.0, "audio")
    assert (r.frame_format, r.sample_rate, r.content_type) == ("pcm_s16le", 24000, "audio/mpeg")


@pytest.mark.parametrize("fmt,frames,rate,content_type", [
    ("pcm", "pcm_s16le", 24000, "audio/pcm"),
    ("flac", "pcm_s16le", 24000, "audio/flac"),
    ("opus", "opus", 48000, "audio/ogg"),
])
def test_formats(fmt, frames, rate, content_type):
    r = parse(model="m", input="Hi.", voice=DEFAULT_VOICE, response_format=fmt, speed=2, stream_format="sse")
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
    ({"model": "m", "input": "Hi.", "voice": "alloy", "response_format": "wma"}, "response_format"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "stream_format": "chunks"}, "stream_format"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "speed": 5}, "speed"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "speed": "fast"}, "speed"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "speed": True}, "speed"),
    ({"model": 3, "input": "Hi.", "voice": "alloy"}, "model"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "seed": -1}, "seed"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "noise_w": "loud"}, "noise_w"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "stream": "no"}, "stream"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "guidance_scale": 11}, "guidance_scale"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "temperature": -0.5}, "temperature"),
    ({"model": "m", "input": "Hi.", "voice": "alloy", "stream": False, "stream_format": "sse"}, "stream"),
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


def test_voice_parameters_as_extensions_and_speed_as_length_scale():
    r = parse(model="m", input="Hi.", voice="alloy", speed=2, seed=5, noise_w=0.5, length_scale=3)
    assert dict(r.voice_params) == {LENGTH_SCALE: 0.5, SEED: 5, NOISE_W: 0.5}  # speed wins over length_scale
    assert parse(model="m", input="Hi.", voice="alloy").voice_params == ()


def test_the_ar_familys_sampling_as_extensions():
    r = parse(model="m", input="Hi.", voice="alloy", temperature=0, guidance_scale=2.5)
    assert dict(r.voice_params) == {TEMPERATURE: 0, GUIDANCE_SCALE: 2.5}


def speech_body(fmt: str, stream_format: str = "audio") -> tuple[bytes, list[bytes]]:
    """A second of a 440 Hz tone at 22,050 Hz pushed in uneven chunks; the whole body
    and the pieces returned along the way."""
    body = SpeechBody(parse(model="m", input="Hi.", voice="alloy", response_format=fmt, stream_format=stream_format), 22050)
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(22050) / 22050)).astype(np.float32)
    pieces = [body.push(tone[a:b]) for a, b in ((0, 1000), (1000, 9000), (9000, 22050))]
    pieces.append(body.finish())
    return b"".join(pieces), pieces


@pytest.mark.parametrize("fmt", ["wav", "opus", "mp3", "aac"])
def test_a_speech_body_streams_a_container_of_the_pushed_length(fmt):
    data, pieces = speech_body(fmt)
    assert pieces[0] or pieces[1]  # bytes leave before the end
    with av.open(io.BytesIO(data)) as container:
        frames = list(container.decode(audio=0))
    seconds = sum(f.samples for f in frames) / frames[0].sample_rate
    # Padded to whole 20 ms frames; Opus drops its 6.5 ms pre-skip; mp3 and aac decode
    # with their encoders' delay and last frame (within 0.12 s).
    assert 1.0 - 0.007 <= seconds <= (1.12 if fmt in ("mp3", "aac") else 1.02)


# The headers OpenAI's Python SDK sends (tests/integration/test_speech_http.py sees them on the wire):
# X-Stainless-Lang on every request, X-Stainless-Raw-Response from with_raw_response
# ("true") and with_streaming_response ("stream").
SDK = {"X-Stainless-Lang": "python", "X-Stainless-Package-Version": "3.51.0"}


@pytest.mark.parametrize("headers,streams", [
    ({}, True),  # curl, a browser, urllib
    (SDK, False),  # the SDK's plain create, which reads the whole body before returning
    (SDK | {"X-Stainless-Raw-Response": "true"}, False),  # with_raw_response: read whole too
    (SDK | {"X-Stainless-Raw-Response": "stream"}, True),  # with_streaming_response
    ({"x-stainless-lang": "python", "x-stainless-raw-response": "stream"}, True),  # header case is no matter
    ({"X-Stainless-Lang": "js"}, True),  # the Node SDK hands its caller the body as it streams
])
def test_only_the_python_sdks_plain_create_gets_a_whole_body_by_default(headers, streams):
    assert streams_by_default(CIMultiDict(headers)) is streams


def test_the_stream_field_wins_over_the_default_and_sse_always_streams():
    def stream(default: bool, **body) -> bool:
        raw = json.dumps({"model": "m", "input": "Hi.", "voice": "alloy", **body}).encode()
        return parse_speech_request(raw, VOICES, 100, default).stream

    assert (stream(True), stream(False)) == (True, False)
    assert stream(False, stream=True) and not stream(True, stream=False)
    assert stream(False, stream_format="sse")
    # FLAC comes whole whatever is asked: its streamed header could not say its length.
    assert not stream(True, response_format="flac", stream=True)
    assert not stream(True, response_format="flac", stream_format="sse")


@pytest.mark.parametrize("stream_format", ["audio", "sse"])
def test_flac_asked_as_a_stream_comes_whole_from_finish_with_its_exact_length(stream_format):
    data, pieces = speech_body("flac", stream_format)
    assert pieces[:-1] == [b"", b"", b""]  # nothing before the end
    if stream_format == "sse":
        *deltas, done = [json.loads(line[6:]) for line in data.decode().splitlines() if line.startswith("data: ")]
        assert len(deltas) == 1 and done == {"type": "speech.audio.done"}
        data = base64.b64decode(deltas[0]["audio"])
    assert flac_total_samples(data) == 24000  # a second at 24 kHz, whole 20 ms frames
    assert len(soundfile.read(io.BytesIO(data))[0]) == 24000


def test_a_body_not_streamed_comes_whole_from_finish_with_exact_sizes():
    assert riff_sizes(speech_body("wav")[0])[:2] == (UNKNOWN_WAV_SIZE, UNKNOWN_WAV_SIZE)
    for fmt in ("wav", "flac"):
        body = SpeechBody(parse(model="m", input="Hi.", voice="alloy", response_format=fmt, stream=False), 22050)
        tone = np.sin(np.arange(22050) / 22050 * 2 * np.pi * 440).astype(np.float32) * 0.3
        assert body.push(tone) == b""
        data = body.finish()
        samples = 24000  # a second at 24 kHz, whole 20 ms frames
        if fmt == "wav":
            riff, size, start = riff_sizes(data)
            assert (riff, size) == (len(data) - 8, len(data) - start) and size == 2 * samples
            with wave.open(io.BytesIO(data)) as w:
                assert w.getnframes() == samples and len(w.readframes(samples + 1)) == samples * 2
        else:
            assert flac_total_samples(data) == samples
        assert len(soundfile.read(io.BytesIO(data))[0]) == samples


@pytest.mark.parametrize("fmt,low,high", [
    ("opus", 0.993, 1.0),  # less the 6.5 ms pre-skip
    ("mp3", 1.0, 1.0),  # a whole mp3 has its Xing header, which tells decoders its delay and padding
    ("aac", 1.0, 1.07),  # ADTS cannot: the encoder's delay and last frame remain
])
def test_a_whole_body_in_the_other_formats_decodes_to_the_pushed_length(fmt, low, high):
    body = SpeechBody(parse(model="m", input="Hi.", voice="alloy", response_format=fmt, stream=False), 22050)
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(22050) / 22050)).astype(np.float32)
    assert body.push(tone) == b""
    with av.open(io.BytesIO(body.finish())) as container:
        frames = list(container.decode(audio=0))
    assert low <= sum(f.samples for f in frames) / frames[0].sample_rate <= high


def test_an_sse_body_wraps_the_container_in_deltas_then_done():
    data, _ = speech_body("pcm", "sse")
    events = [json.loads(line[6:]) for line in data.decode().split("\n\n") if line]
    assert events[-1] == {"type": "speech.audio.done"}
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert len(pcm) == 2 * 24000 and len(events) > 2  # one second: 50 frames of 20 ms at 24 kHz


def test_instructions_are_accepted_and_change_nothing():
    plain = {"model": "gpt-4o-mini-tts", "voice": "alloy", "input": "Hi."}
    asked = parse_speech_request(json.dumps(plain | {"instructions": "Speak cheerfully."}).encode(), VOICES, 100)
    assert asked == parse_speech_request(json.dumps(plain).encode(), VOICES, 100)
