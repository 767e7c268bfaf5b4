"""OpenAI's `POST /v1/audio/speech` on the running gateway, driven by the official
`openai` package: streamed bodies in every format, SSE, errors, API key, disconnects."""

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

from client.speech import SyncSpeechClient
from perf.servers import start_gateway, stop, triton_metrics
from perf.workloads import workload
from contract import models as c
from operations.triton_client import inference_count
from tests.test_gateway_containers import flac_total_samples

pytestmark = pytest.mark.triton

SEED = 11
TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."


def base_url(gateway: str) -> str:
    return gateway.replace("ws://", "http://").rsplit("/v1/", 1)[0] + "/v1"


def client(gateway: str, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url(gateway), api_key=api_key, max_retries=0)


@pytest.fixture(scope="module")
def spoken_ms(gateway):
    """The text's duration as protocol v1 speaks it with the same seed."""
    with SyncSpeechClient.connect(gateway, format="pcm_s16le", sample_rate=24000, seed=SEED) as ws:
        list(ws.speak(TEXT))
        return ws.done["audio_ms"]


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


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_a_body_asked_for_whole_has_its_length_and_exact_sizes(gateway, spoken_ms, fmt):
    response = client(gateway).audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format=fmt, extra_body={"seed": SEED, "stream": False},
    )
    data = response.content
    assert int(response.headers["content-length"]) == len(data)
    with av.open(io.BytesIO(data)) as container:
        decoded = sum(f.samples for f in container.decode(audio=0))
    assert 0 <= decoded / 24 - spoken_ms <= 20
    if fmt == "wav":
        with wave.open(io.BytesIO(data)) as w:
            assert w.getnframes() == decoded
    else:
        assert flac_total_samples(data) == decoded


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


def test_a_client_that_goes_away_stops_the_synthesis(gateway, triton):
    with client(gateway).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=workload("long"), response_format="pcm",
    ) as response:
        next(response.iter_bytes())
    # The connection is closed with most of the text unspoken; Triton stops vocoding it.
    time.sleep(0.5)
    settled = inference_count(triton.grpc_url, c.VOCODER_MODEL)
    time.sleep(1.0)
    assert inference_count(triton.grpc_url, c.VOCODER_MODEL) == settled


def test_an_api_key_guards_the_endpoint(triton, tmp_path):
    with (tmp_path / "gateway.log").open("w") as log:
        process, port = start_gateway(triton.grpc_url, log, "--api-key", "k3y")
        try:
            gateway = f"ws://127.0.0.1:{port}/v1/stream"
            with pytest.raises(openai.AuthenticationError):
                client(gateway, "wrong").audio.speech.create(model="tts-1", voice="alloy", input="Hi.")
            speech = client(gateway, "k3y").audio.speech.create(
                model="tts-1", voice="alloy", input="Hi.", response_format="pcm"
            )
            assert len(speech.content) > 0
        finally:
            stop(process)


def test_metrics_count_http_speech(gateway):
    port = int(base_url(gateway).split(":")[-1].removesuffix("/v1"))
    before = triton_metrics(port)  # the same Prometheus text parser serves Triton's and ours
    pcm = client(gateway).audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm").content
    with pytest.raises(openai.BadRequestError):
        client(gateway).audio.speech.create(model="tts-1", voice="alloy", input=TEXT, speed=0)
    after = triton_metrics(port)
    assert after["speechstream_ttfp_seconds_count"] - before["speechstream_ttfp_seconds_count"] == 1
    audio_s = after["speechstream_audio_seconds_total"] - before["speechstream_audio_seconds_total"]
    assert audio_s == pytest.approx(len(pcm) / 2 / 24000, abs=0.001)
    assert after["speechstream_errors_total"] - before.get("speechstream_errors_total", 0) == 1
