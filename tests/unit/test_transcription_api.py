"""OpenAI's `POST /v1/audio/transcriptions` without Triton: the form's fields, the
segments gathered from the recognizer's events, every response_format, the upload
decoded, and the endpoint's refusals through the real aiohttp application in process.
Where a recognizer must answer, a stand-in for Triton's gRPC stream plays it (said so
below): the real one is in tests/integration/test_transcription_api.py."""

import asyncio
import json
from types import SimpleNamespace

import numpy as np
import pytest
from aiohttp import FormData
from aiohttp.test_utils import TestClient, TestServer

from contract import models as c
from gateway.backends.recognition import RecognitionFailed
from gateway.backends.servers import Backend, Backends
from gateway.edge.service import Gateway
from gateway.protocols.speech_api import ApiError
from gateway.protocols.transcription_api import TRANSCRIPTIONS_PATH, recognize
from gateway.protocols.transcripts import Transcript, TranscriptionRequest, parse_transcription_form, transcription_body
from gateway.server import application
from gateway.settings import Settings
from speechstream import protocol as v1
from speechstream.media.decoding import AudioTooLong, UndecodableAudio, decode_audio
from tests.audio import FILE_FORMATS, encode_file

RATE = 16000


def tone(seconds, rate=RATE):
    return (np.sin(np.arange(int(seconds * rate)) / 5) * 8000).astype(np.int16)


def parse(audio=b"RIFF", **fields):
    return parse_transcription_form(list(({"model": "whisper-1"} | fields).items()), audio)


def test_a_request_with_defaults_and_the_fields_that_change_nothing():
    r = parse(prompt="Names: Anna.", temperature="0.2", language="en")
    assert (r.model, r.response_format, r.language, r.content_type) == ("whisper-1", "json", "en", "application/json")
    assert parse(model="speechstream-asr", response_format="vtt").content_type == "text/vtt; charset=utf-8"


@pytest.mark.parametrize("audio, fields, param", [
    (None, {}, "file"),
    (b"", {}, "file"),
    (b"x", {"model": ""}, "model"),
    (b"x", {"response_format": "mp3"}, "response_format"),
    (b"x", {"language": "de"}, "language"),
    (b"x", {"timestamp_granularities[]": "word"}, "timestamp_granularities"),
    (b"x", {"stream": "true"}, "stream"),
])
def test_a_bad_field_is_refused_naming_it(audio, fields, param):
    with pytest.raises(ApiError) as e:
        parse(audio, **fields)
    assert e.value.param == param and e.value.status == 400
    if param == "language":
        assert "English only" in e.value.message


def test_segments_are_the_utterances_with_words_where_their_speech_started_and_stopped():
    t = transcript(
        (c.SPEECH_STARTED, 1, 300, ""), (c.SPEECH_STARTED, 0, 120, ""), (c.SPEECH_STOPPED, 0, 1900, ""),
        (c.FINAL, 0, 2400, " The birch canoe slid. "), (c.SPEECH_STOPPED, 1, 280, ""), (c.FINAL, 1, 280, ""),
        (c.SPEECH_STARTED, 2, 3000, ""), (c.FINAL, 2, 3500, "Glue the sheet."),  # ended by the file's end
    )
    assert [(s.start_s, s.end_s, s.text) for s in t.segments(3.4)] == [
        (0.12, 1.9, "The birch canoe slid."), (3.0, 3.4, "Glue the sheet."),  # noise left out, clipped to the audio
    ]


def transcript(*events):
    t = Transcript()
    for kind, utterance, ms, text in events:
        t.heard(kind, ("s", utterance), ms, text)
    return t


def body(fmt):
    request = TranscriptionRequest(b"x", "whisper-1", fmt)
    heard = transcript((c.SPEECH_STARTED, 0, 500, ""), (c.SPEECH_STOPPED, 0, 2250, ""), (c.FINAL, 0, 2250, "Hello there."),
                       (c.SPEECH_STARTED, 1, 3000, ""), (c.SPEECH_STOPPED, 1, 3723, ""), (c.FINAL, 1, 3723, "Bye."))
    return transcription_body(request, heard.segments(4.5), 4.5).decode()


def test_json_and_text_are_the_whole_transcript():
    assert json.loads(body("json")) == {"text": "Hello there. Bye.", "usage": {"type": "duration", "seconds": 5}}
    assert body("text") == "Hello there. Bye.\n"


def test_verbose_json_has_openais_fields_and_a_segment_per_utterance():
    verbose = json.loads(body("verbose_json"))
    assert {k: verbose[k] for k in ("task", "language", "duration", "text")} == {
        "task": "transcribe", "language": "english", "duration": 4.5, "text": "Hello there. Bye."}
    assert [(s["id"], s["start"], s["end"], s["text"]) for s in verbose["segments"]] == [
        (0, 0.5, 2.25, "Hello there."), (1, 3.0, 3.723, "Bye.")]
    assert set(verbose["segments"][0]) >= {"seek", "tokens", "temperature", "avg_logprob", "compression_ratio",
                                           "no_speech_prob"}


def test_subtitles():
    assert body("srt") == "1\n00:00:00,500 --> 00:00:02,250\nHello there.\n\n2\n00:00:03,000 --> 00:00:03,723\nBye.\n\n"
    assert body("vtt") == "WEBVTT\n\n00:00:00.500 --> 00:00:02.250\nHello there.\n\n00:00:03.000 --> 00:00:03.723\nBye.\n\n"


@pytest.mark.parametrize("fmt", FILE_FORMATS)
def test_every_format_decodes_to_the_recognizers_rate(fmt):
    pcm = decode_audio(encode_file(tone(2.0, 22050), 22050, fmt), RATE, 10)
    assert pcm.dtype == np.int16 and abs(pcm.size / RATE - 2.0) < 0.06  # AAC pads a frame
    assert np.abs(pcm).max() > 4000


def test_what_is_no_audio_file_or_too_long_is_refused():
    for data in (b"not audio at all" * 20, encode_file(tone(1.0), RATE, "wav")[:40]):
        with pytest.raises(UndecodableAudio):
            decode_audio(data, RATE, 10)
    aiff = encode_file(tone(1.0), RATE, "wav").replace(b"WAVE", b"AIFF")  # no demuxer of the list takes it
    with pytest.raises(UndecodableAudio):
        decode_audio(aiff, RATE, 10)
    with pytest.raises(AudioTooLong):
        decode_audio(encode_file(tone(3.0), RATE, "wav"), RATE, 2.0)


class Recognizer:
    """A stand-in for Triton's `asr` on one gRPC stream (a mock: the real model is the
    integration tier's). It records the requests and, at STOP, says each run of sound
    (not zeros) is an utterance, "words N", at its place in the timeline."""

    def __init__(self, fail=None, answer_stop=True):
        self.requests, self.fail, self.answer_stop = [], fail, answer_stop

    async def stream_infer(self, requests):
        audio = []
        async for request in requests:
            tensors = {i.name(): i for i in request["inputs"]}
            self.requests.append({name: _array(t) for name, t in tensors.items()})
            if self.fail:
                yield None, SimpleNamespace(message=lambda: self.fail)
                return
            if c.AUDIO in tensors:
                audio.append(self.requests[-1][c.AUDIO])
            if c.STOP in tensors:
                if not self.answer_stop:
                    await asyncio.sleep(3600)
                for event in _utterances(np.concatenate(audio)):
                    yield _result(request["request_id"], False, *event), None
            yield _result(request["request_id"], True), None


def _array(tensor):
    """A request tensor's values (the private raw bytes tritonclient keeps)."""
    if tensor.datatype() == "BYTES":
        return None
    return np.frombuffer(tensor._get_content(), {"INT16": np.int16, "INT32": np.int32, "BOOL": bool}[tensor.datatype()])


def _utterances(audio):
    sound = np.flatnonzero(np.diff(np.concatenate([[0], audio != 0, [0]]).astype(int)))
    for n, (start, stop) in enumerate(zip(sound[::2], sound[1::2])):
        start_ms, stop_ms = start * 1000 // RATE, stop * 1000 // RATE
        yield from [(c.SPEECH_STARTED, n, start_ms, ""), (c.SPEECH_STOPPED, n, stop_ms, ""),
                    (c.FINAL, n, stop_ms, f"words {n}")]


def _result(request_id, final, kind=None, utterance=0, ms=0, text=""):
    outputs = {} if kind is None else {
        c.EVENT: np.array([kind.encode()], object), c.UTTERANCE: np.array([utterance], np.int32),
        c.AUDIO_MS: np.array([ms], np.int64), c.TEXT: np.array([text.encode()], object)}
    response = SimpleNamespace(id=request_id, parameters={"triton_final_response": SimpleNamespace(bool_param=final)})
    return SimpleNamespace(get_response=lambda: response, as_numpy=outputs.get)


def backends_of(recognizer):
    backends = Backends(())
    backends.all.append(Backend("stand-in", recognizer, up=True, probe_error=None))
    return backends


def test_a_file_goes_to_the_recognizer_a_second_a_request_finals_only_then_its_end_and_stop():
    sound = np.full(RATE, 3000)  # never zero, unlike a tone: one run of sound to the stand-in
    audio = np.concatenate([np.zeros(RATE // 2), sound, sound[:RATE // 5], np.zeros(RATE), sound[:RATE // 2],
                            np.zeros(RATE // 4)])
    recognizer = Recognizer()
    transcript = asyncio.run(recognize(backends_of(recognizer), audio.astype(np.int16), 10))
    assert [(s.start_s, s.end_s, s.text) for s in transcript.segments(3.45)] == [
        (0.5, 1.7, "words 0"), (2.7, 3.2, "words 1")]
    *hears, stop = recognizer.requests
    assert [h[c.AUDIO].size for h in hears] == [RATE, RATE, RATE, RATE * 45 // 100]
    assert all(h[c.PARTIALS].tolist() == [False] and c.STOP not in h for h in hears)
    assert [c.END in h for h in hears] == [False, False, False, True] and stop[c.STOP].tolist() == [True]


@pytest.mark.parametrize("recognizer, code", [
    (Recognizer(fail="the model failed"), v1.RECOGNITION_FAILED),
    (Recognizer(fail="Stub process 'asr_0_0' is not healthy."), v1.BACKEND_UNAVAILABLE),
    (Recognizer(answer_stop=False), v1.RECOGNITION_FAILED),
])
def test_a_recognizer_that_fails_or_does_not_finish_fails_the_request(recognizer, code):
    with pytest.raises(RecognitionFailed) as e:
        asyncio.run(recognize(backends_of(recognizer), tone(1.0), 0.5))
    assert e.value.code == code


def settings(**overrides):
    # No Triton at all (so no gRPC channel either), no readiness probe, no other gateway's load to read.
    return Settings(**{"triton_urls": (), "probe_interval_s": 0, "admission_load": 0,
                       "fleet_metrics_port": 0, "listen": True} | overrides)


class Raw(bytes):
    """A body that says it is a form and is not one."""

    headers = {"Content-Type": "multipart/form-data; boundary=xyz"}


def post(form, **overrides):
    """POST the form to the real application in process; (status, JSON body)."""

    async def main():
        async with TestClient(TestServer(application(Gateway(settings(**overrides))))) as client:
            response = await client.post(TRANSCRIPTIONS_PATH, data=form, headers=getattr(form, "headers", None))
            return response.status, await response.json()

    return asyncio.run(main())


def form(audio=None, **fields):
    data = FormData(default_to_multipart=True)
    for name, value in ({"model": "whisper-1"} | fields).items():
        data.add_field(name, value)
    if audio is not None:
        data.add_field("file", audio, filename="speech.wav", content_type="audio/wav")
    return data


WAV = encode_file(tone(1.0), RATE, "wav")


@pytest.mark.parametrize("data, overrides, status, says", [
    (form(WAV), {"listen": False}, 404, "runs no speech recognizer"),
    (form(), {}, 400, "'file' is required"),
    (form(b"\x00not audio" * 50), {}, 400, "could not decode the audio file"),
    (form(WAV, language="fr"), {}, 400, "English only"),
    (form(WAV), {"max_upload_bytes": 1000}, 413, "over 1000 bytes"),
    (form(WAV), {"max_audio_s": 0.5}, 400, "longer than 0.5 s"),
    ({"model": "whisper-1"}, {}, 415, "multipart/form-data"),
    (Raw(b"--xyz\r\nno end"), {}, 400, "the form cannot be read"),
    (form(WAV), {"api_key": "k3y"}, 401, ""),
    (form(WAV), {}, 503, "no Triton server"),
])
def test_the_endpoint_refuses_in_openais_shape(data, overrides, status, says):
    got, answer = post(data, **overrides)
    assert got == status and says in answer["error"]["message"], answer
    assert answer["error"]["type"] == "invalid_request_error"


def test_the_models_list_names_the_transcription_models_where_the_recognizer_is_served():
    async def models(listen):
        async with TestClient(TestServer(application(Gateway(settings(listen=listen))))) as client:
            return [m["id"] for m in (await (await client.get("/v1/models")).json())["data"]]

    assert {"whisper-1", "gpt-4o-transcribe", "speechstream-asr", "tts-1"} <= set(asyncio.run(models(True)))
    assert "whisper-1" not in asyncio.run(models(False))
