"""OpenAI's `POST /v1/audio/speech` on the running gateway, driven by the official
`openai` package: streamed bodies in every format, whole bodies with exact sizes for the
SDK's plain calls, SSE, errors, API key, disconnects."""

import asyncio
import base64
import io
import json
import time
import urllib.request
import wave

import av
import httpx2
import numpy as np
import openai
import pytest
import soundfile

from contract import models as c
from operations.loopback import triton_metrics
from operations.triton_client import inference_count
from perf.tools.workloads import workload
from speechstream.client import SyncSpeechClient
from tests.unit.test_gateway_containers import (
    UNKNOWN_WAV_SIZE,
    flac_total_samples,
    riff_sizes,
)

SEED = 11
TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."


def base_url(gateway: str) -> str:
    return gateway.replace("ws://", "http://").rsplit("/v1/", 1)[0] + "/v1"


def client(gateway: str, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url(gateway), api_key=api_key, max_retries=0)


def decoded_seconds(path, fmt: str) -> float:
    if fmt == "pcm":
        return path.stat().st_size / 2 / 24000
    with av.open(str(path)) as container:
        frames = list(container.decode(audio=0))
    return sum(f.samples for f in frames) / frames[0].sample_rate


@pytest.mark.parametrize("fmt", ["pcm", "wav", "flac", "opus", "mp3", "aac", None])
def test_the_openai_sdk_streams_each_format_to_a_file_of_the_spoken_length(gateway, spoken_ms, tmp_path, fmt):
    asked = {} if fmt is None else {"response_format": fmt}  # None: the SDK's default, which sends none
    fmt = fmt or "mp3"  # the server's default, as OpenAI's
    path = tmp_path / f"speech.{fmt}"
    with client(gateway).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=TEXT, extra_body={"seed": SEED}, **asked,
    ) as response:
        assert response.headers["content-type"] == {"pcm": "audio/pcm", "wav": "audio/wav", "flac": "audio/flac",
                                                    "opus": "audio/ogg", "mp3": "audio/mpeg", "aac": "audio/aac"}[fmt]
        response.stream_to_file(path)
    # The body's last frame is padded to 20 ms, as protocol v1's is; an Opus decoder
    # drops the encoder's 6.5 ms look-ahead (the Ogg header's pre-skip).
    # mp3 and aac decode with their encoders' delay and last frame.
    low = -7 if fmt == "opus" else 0
    assert low <= decoded_seconds(path, fmt) * 1000 - spoken_ms <= (120 if fmt in ("mp3", "aac") else 20)


@pytest.fixture(scope="module")
def spoken_samples(gateway):
    """The text's samples at 24 kHz, as the pcm format gives them with the same seed."""
    with client(gateway).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm", extra_body={"seed": SEED},
    ) as response:
        return len(response.read()) // 2


def sdk_create(gateway: str, call: str, fmt: str) -> tuple[bytes, httpx2.Headers]:
    """The body and headers of one of the SDK's calls that are not asked to stream."""
    asked = dict(model="tts-1", voice="alloy", input=TEXT, response_format=fmt, extra_body={"seed": SEED})
    speech = client(gateway).audio.speech
    if call == "create":
        response = speech.create(**asked).response
    elif call == "async create":
        async def create() -> httpx2.Response:
            async with openai.AsyncOpenAI(base_url=base_url(gateway), api_key="unused", max_retries=0) as sdk:
                return (await sdk.audio.speech.create(**asked)).response
        response = asyncio.run(create())
    elif call == "with_raw_response":
        response = speech.with_raw_response.create(**asked).http_response
    else:  # with_streaming_response told not to stream: the request's field wins
        asked["extra_body"] |= {"stream": False}
        with speech.with_streaming_response.create(**asked) as streaming:
            return streaming.read(), streaming.headers
    return response.content, response.headers


@pytest.mark.parametrize("call", ["create", "async create", "with_raw_response", "stream false"])
@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_the_sdks_calls_not_streamed_read_back_to_the_spoken_length(gateway, spoken_ms, spoken_samples, fmt, call):
    """The SDK's plain calls read the whole body before returning: it comes whole, with
    Content-Length and the exact length in its header, which every reader believes."""
    data, headers = sdk_create(gateway, call, fmt)
    assert int(headers["content-length"]) == len(data) and "transfer-encoding" not in headers
    assert 0 <= spoken_samples / 24 - spoken_ms <= 20  # the last frame padded to 20 ms
    assert len(soundfile.read(io.BytesIO(data), dtype="int16")[0]) == spoken_samples
    with av.open(io.BytesIO(data)) as container:
        assert sum(frame.samples for frame in container.decode(audio=0)) == spoken_samples
    if fmt == "wav":
        riff, size, start = riff_sizes(data)
        assert (riff, size, len(data) - start) == (len(data) - 8, 2 * spoken_samples, 2 * spoken_samples)
        with wave.open(io.BytesIO(data)) as w:
            assert w.getnframes() == spoken_samples and len(w.readframes(w.getnframes())) == 2 * spoken_samples
    else:
        assert flac_total_samples(data) == spoken_samples


def test_a_streamed_wav_says_its_length_is_unknown_and_is_read_to_its_end(gateway, spoken_samples):
    with client(gateway).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="wav", extra_body={"seed": SEED},
    ) as response:
        assert response.headers["transfer-encoding"] == "chunked" and "content-length" not in response.headers
        data = response.read()
    with av.open(io.BytesIO(data)) as container:  # FFmpeg, as browsers and ffplay read it
        assert sum(frame.samples for frame in container.decode(audio=0)) == spoken_samples
    assert riff_sizes(data)[:2] == (UNKNOWN_WAV_SIZE, UNKNOWN_WAV_SIZE)
    assert len(soundfile.read(io.BytesIO(data), dtype="int16")[0]) == spoken_samples
    with wave.open(io.BytesIO(data)) as w:  # it believes 2**31 - 1 frames, and reads what there is
        assert len(w.readframes(w.getnframes())) == 2 * spoken_samples


@pytest.mark.parametrize("asked", ["with_streaming_response", "stream true", "sse"])
def test_flac_asked_as_a_stream_comes_whole_and_every_reader_reads_it_to_the_spoken_length(gateway, spoken_samples,
                                                                                            asked):
    """A streamed FLAC header could not say its length, which libsndfile refuses: FLAC
    comes whole whatever the request, with its exact length."""
    if asked == "with_streaming_response":
        with client(gateway).audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=TEXT, response_format="flac", extra_body={"seed": SEED},
        ) as response:
            data, headers = response.read(), response.headers
    else:
        fields = {"stream": True} if asked == "stream true" else {"stream_format": "sse"}
        request = urllib.request.Request(
            base_url(gateway) + "/audio/speech", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "flac",
                             "seed": SEED, **fields}).encode(),
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            data, headers = response.read(), response.headers
    assert int(headers["content-length"]) == len(data)
    if asked == "sse":
        (delta, done) = [json.loads(line[6:]) for line in data.decode().splitlines() if line.startswith("data: ")]
        assert (delta["type"], done["type"]) == ("speech.audio.delta", "speech.audio.done")
        data = base64.b64decode(delta["audio"])
    assert flac_total_samples(data) == spoken_samples
    assert len(soundfile.read(io.BytesIO(data), dtype="int16")[0]) == spoken_samples
    with av.open(io.BytesIO(data)) as container:
        assert sum(frame.samples for frame in container.decode(audio=0)) == spoken_samples


def test_a_request_without_the_sdks_headers_streams_unless_told_not_to(gateway):
    """curl's request, for one: the body streams, unless the request says `stream` false."""
    def post(**fields) -> tuple[dict, bytes]:
        request = urllib.request.Request(
            base_url(gateway) + "/audio/speech", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": "tts-1", "voice": "alloy", "input": "Hello there.",
                             "response_format": "wav", **fields}).encode(),
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return dict(response.headers), response.read()

    headers, data = post()
    assert headers["Transfer-Encoding"] == "chunked" and riff_sizes(data)[1] == UNKNOWN_WAV_SIZE
    headers, data = post(stream=False)
    assert int(headers["Content-Length"]) == len(data) and riff_sizes(data)[1] == len(data) - riff_sizes(data)[2]


@pytest.mark.parametrize("speed", [0.5, 4.0])
def test_speed_divides_the_duration(gateway, spoken_ms, speed):
    body = client(gateway).audio.speech.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm", speed=speed, extra_body={"seed": SEED},
    ).content
    ms = len(body) / 2 / 24
    assert abs(ms - spoken_ms / speed) <= 0.05 * spoken_ms / speed  # was 2.1 x shorter at speed 4


def test_the_body_streams_while_the_audio_is_made(gateway):
    sent = time.monotonic()
    arrivals = []
    with client(gateway).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=workload("paragraph"), response_format="pcm",
    ) as response:
        for chunk in response.iter_bytes():
            arrivals.append((time.monotonic() - sent, len(chunk)))
    audio_s = sum(n for _, n in arrivals) / 2 / 24000
    assert audio_s > 10
    # The first audio comes long before the last: it is sent as it is made.
    assert arrivals[0][0] < 0.3 * arrivals[-1][0]


def test_sse_carries_the_format_in_deltas_then_done(gateway):
    request = urllib.request.Request(
        base_url(gateway) + "/audio/speech", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"model": "tts-1", "voice": "nova", "input": TEXT, "response_format": "pcm",
                         "stream_format": "sse", "seed": SEED}).encode(),
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        events = [json.loads(line[6:]) for line in response.read().decode().splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events[-1:]] == ["speech.audio.done"]
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"} and len(events) > 3
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    with SyncSpeechClient.connect(gateway, format="pcm_s16le", sample_rate=24000, seed=SEED) as ws:
        spoken = b"".join(frame.payload for frame in ws.speak(TEXT))
    # The same seed gives the same audio over both interfaces.
    assert len(pcm) == len(spoken)
    a, b = (np.frombuffer(x, "<i2").astype(np.float64) for x in (pcm, spoken))
    assert np.corrcoef(a, b)[0, 1] > 0.999


@pytest.mark.parametrize("body,param", [
    ({"voice": "alloy", "input": "Hi."}, "model"),
    ({"model": "tts-1", "voice": "alloy", "input": "   "}, "input"),
    ({"model": "tts-1", "voice": "nobody", "input": "Hi."}, "voice"),
    ({"model": "tts-1", "voice": "alloy", "input": "Hi.", "response_format": "wma"}, "response_format"),
    ({"model": "tts-1", "voice": "alloy", "input": "Hi.", "speed": 9}, "speed"),
    ({"model": "tts-1", "voice": "alloy", "input": "Hi.", "seed": -1}, "seed"),
])
def test_bad_requests_get_openai_shaped_errors(gateway, body, param):
    sdk = client(gateway)
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.post("/audio/speech", body=body, cast_to=httpx2.Response)  # the SDK's path, unchecked
    assert refused.value.status_code == 400
    assert refused.value.body["param"] == param and refused.value.body["type"] == "invalid_request_error"
    # The server goes on serving.
    assert len(sdk.audio.speech.create(model="tts-1", voice="alloy", input="Still here.", response_format="pcm").content) > 0


def test_a_body_that_is_not_json_or_too_large_is_refused(gateway):
    def post(data: bytes) -> tuple[int, dict]:
        request = urllib.request.Request(
            base_url(gateway) + "/audio/speech", data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, {}
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    status, body = post(b"{not json")
    assert status == 400 and "JSON" in body["error"]["message"]
    status, body = post(json.dumps({"model": "m", "voice": "alloy", "input": "word " * 100_000}).encode())
    assert status == 413 and "bytes" in body["error"]["message"]


def settled_vocoder_calls(triton, quiet_s: float = 1.0, within_s: float = 30.0) -> int:
    """Triton's vocoder inferences once they have stopped growing for `quiet_s`: on a
    busy machine, the calls in flight when a stream is cancelled take a while to end."""
    deadline = time.monotonic() + within_s
    count = inference_count(triton.grpc_url, c.VOCODER_MODEL)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        count, last = inference_count(triton.grpc_url, c.VOCODER_MODEL), count
        if count == last:
            return count
    pytest.fail(f"the vocoder was still working after {within_s:g} s")


@pytest.fixture(scope="module")
def paragraph_vocoder_calls(gateway, triton) -> int:
    """The vocoder calls that speaking workload("paragraph") takes; "long" is six times as long."""
    before = settled_vocoder_calls(triton)
    with SyncSpeechClient.connect(gateway, format="pcm_s16le", sample_rate=24000) as ws:
        list(ws.speak(workload("paragraph")))
    return settled_vocoder_calls(triton) - before


def test_a_client_that_goes_away_stops_the_synthesis(gateway, triton, paragraph_vocoder_calls):
    before = settled_vocoder_calls(triton)
    with client(gateway).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=workload("long"), response_format="pcm",
    ) as response:
        next(response.iter_bytes())
    # The connection is closed with most of the text unspoken; Triton stops vocoding it.
    assert settled_vocoder_calls(triton) - before < 3 * paragraph_vocoder_calls  # half the text's


def test_a_client_that_hangs_up_on_a_whole_body_stops_the_synthesis(gateway, triton, paragraph_vocoder_calls):
    """A whole body is sent only at its end, so nothing written fails when its client
    leaves (the SDK's timeout, here): the gateway notices the closed connection itself."""
    before = settled_vocoder_calls(triton)
    with pytest.raises(openai.APITimeoutError):
        client(gateway).with_options(timeout=1.0).audio.speech.create(
            model="tts-1", voice="alloy", input=workload("long"), response_format="wav",
        )
    assert settled_vocoder_calls(triton) - before < 3 * paragraph_vocoder_calls  # half the text's


def test_a_whole_body_without_triton_is_an_openai_error(gateways):
    """No audio, no body: the SDK's plain create gets OpenAI's JSON error, a 503."""
    gateway = gateways.start("127.0.0.1:9", "--probe-interval", "0", "--admission-load", "0", triton_ready=False)
    with pytest.raises(openai.APIStatusError) as refused:
        client(gateway.url).with_options(timeout=20).audio.speech.create(
            model="tts-1", voice="alloy", input="Anyone there?", response_format="wav",
        )
    assert refused.value.status_code == 503 and refused.value.body["type"] == "invalid_request_error"


def test_an_api_key_guards_the_endpoint(triton, gateways):
    gateway = gateways.start(triton.grpc_url, "--api-key", "k3y").url
    with pytest.raises(openai.AuthenticationError):
        client(gateway, "wrong").audio.speech.create(model="tts-1", voice="alloy", input="Hi.")
    speech = client(gateway, "k3y").audio.speech.create(model="tts-1", voice="alloy", input="Hi.", response_format="pcm")
    assert len(speech.content) > 0


def test_metrics_count_http_speech(gateway):
    port = int(base_url(gateway).split(":")[-1].removesuffix("/v1"))
    before = triton_metrics(port)  # the same Prometheus text parser serves Triton's and ours
    with client(gateway).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm"
    ) as response:
        pcm = response.read()
    whole = client(gateway).audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm").content
    with pytest.raises(openai.BadRequestError):
        client(gateway).audio.speech.create(model="tts-1", voice="alloy", input=TEXT, speed=0)
    after = triton_metrics(port)
    # Time to first audio is a streamed body's: a whole one's first byte is its last.
    assert after["speechstream_ttfp_seconds_count"] - before["speechstream_ttfp_seconds_count"] == 1
    audio_s = after["speechstream_audio_seconds_total"] - before["speechstream_audio_seconds_total"]
    assert audio_s == pytest.approx((len(pcm) + len(whole)) / 2 / 24000, abs=0.001)
    assert after["speechstream_errors_total"] - before.get("speechstream_errors_total", 0) == 1
