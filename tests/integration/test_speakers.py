"""A multi-speaker Piper voice: the speaker id reaches each stage that uses it (the
duration predictor, the flow and the decoder), in process, through Triton, over
protocol v1 and over the HTTP API; an id the voice lacks is refused clearly.

The voice is TRIO (tests/voices.py): Piper's own VITS exported as Piper exports it,
with random weights, since no multi-speaker voice can be downloaded here. Its speech is
noise; each speaker's noise is its own, which is what tells the speakers apart.
"""

import asyncio
import json
import urllib.request
from dataclasses import replace

import numpy as np
import onnxruntime as ort
import openai
import pytest

from contract import models as c
from contract.text import split_sentences
from contract.voices import find_voices
from operations.triton_client import StreamError, stream
from python_backends.piper.engines import AcousticEngine, VocoderEngine
from python_backends.piper.inputs import VoiceParams
from python_backends.piper.voice import load_voice
from speechstream import protocol as v1
from speechstream.client import connection
from tests.audio import snr_db
from tests.recorder import Recorder
from tests.voices import TRIO

SENTENCE = "The birch canoe slid on the smooth planks."
NOISELESS = {c.NOISE_SCALE: np.float32(0), c.NOISE_W: np.float32(0)}


def pcm(body: bytes) -> np.ndarray:
    return np.frombuffer(body, np.int16).astype(np.float32)


def sound_different(a: np.ndarray, b: np.ndarray) -> bool:
    """Of other lengths (the speakers' durations differ), or far apart."""
    return a.size != b.size or snr_db(a, b) < 10


@pytest.fixture(scope="module")
def trio(voices_dir):
    return find_voices(voices_dir)[TRIO]


@pytest.fixture(scope="module")
def engines(trio):
    voice = load_voice(trio)
    return AcousticEngine(voice), VocoderEngine(voice)


@pytest.fixture(scope="module")
def whole(trio, engines):
    """Each speaker's PCM for SENTENCE from Piper's whole graph, without noise."""
    acoustic, _ = engines
    model = ort.InferenceSession(str(trio.model), providers=["CPUExecutionProvider"])
    ids = acoustic.ids(split_sentences(SENTENCE)[0])[None]
    inputs = {"input": ids, "input_lengths": np.array([ids.shape[1]]), "scales": np.array([0, 1, 0], np.float32)}
    return [model.run(None, inputs | {"sid": np.array([s])})[0].reshape(-1) for s in range(trio.speakers)]


def test_the_voice_lists_its_speakers(trio):
    assert (trio.speakers, trio.speaker_names) == (3, (("ana", 0), ("ben", 1), ("cy", 2)))


def test_each_speaker_through_the_split_stages_is_the_whole_model_with_its_sid(trio, engines, whole):
    acoustic, vocoder = engines
    sentence = split_sentences(SENTENCE)[0]
    for speaker in range(trio.speakers):
        latent = acoustic.latent(sentence, VoiceParams(1.0, 0.0, 0.0, speaker=speaker)).latent
        audio = vocoder.vocode(latent[None], [speaker])[0]
        assert audio.size == whole[speaker].size
        assert snr_db(whole[speaker], audio) > 100, speaker


def test_every_stage_speaks_differently_as_another_speaker(engines):
    """What makes the test above able to fail: a stage that missed the speaker id."""
    acoustic, vocoder = engines
    sentence = split_sentences(SENTENCE)[0]
    ben, cy = (acoustic.prior(sentence, VoiceParams(1.0, 0.0, 0.0, speaker=s)) for s in (1, 2))
    assert not np.array_equal(acoustic.prior(sentence, VoiceParams(1.0, 0.0, 0.0)).durations, ben.durations)
    as_ben = acoustic.flow(ben, 0, ben.frames)
    assert snr_db(as_ben, acoustic.flow(replace(ben, speaker=cy.speaker), 0, ben.frames)) < 20
    assert snr_db(vocoder.vocode(as_ben[None], [1])[0], vocoder.vocode(as_ben[None], [2])[0]) < 10


def test_a_batch_of_mixed_speakers_vocodes_each_row_as_its_speaker(engines):
    acoustic, vocoder = engines
    latent = acoustic.latent(split_sentences(SENTENCE)[0], VoiceParams(1.0, 0.0, 0.0)).latent
    batch = vocoder.vocode(np.stack([latent] * 3), [2, 0, 1])
    for row, speaker in enumerate((2, 0, 1)):
        assert np.array_equal(batch[row], vocoder.vocode(latent[None], [speaker])[0])
    assert not np.array_equal(batch[0], batch[1])


def test_triton_streams_each_speaker_as_the_whole_model_speaks_it(triton, trio, whole):
    for speaker in range(trio.speakers):
        responses = stream(triton.grpc_url, c.TTS_MODEL,
                           {c.TEXT: SENTENCE, c.VOICE: TRIO, c.SPEAKER: np.int64(speaker)} | NOISELESS)
        pcm = np.concatenate([r.get(c.PCM) for r in responses])
        assert pcm.size == whole[speaker].size
        # Chunked vocoding's joins cost fidelity; another speaker's audio scores below 10 dB.
        assert snr_db(whole[speaker], pcm) > 45, speaker


@pytest.mark.parametrize("model", [c.TTS_MODEL, c.ACOUSTIC_MODEL])
def test_triton_refuses_a_speaker_the_voice_lacks(triton, model):
    with pytest.raises(StreamError, match=f"SPEAKER: speaker 3: voice {TRIO} has 3 speakers, 0 to 2"):
        stream(triton.grpc_url, model, {c.TEXT: "Hi.", c.VOICE: TRIO, c.SPEAKER: np.int64(3)})
    with pytest.raises(StreamError, match=f"speaker 1: voice {c.DEFAULT_VOICE} has one speaker, 0"):
        stream(triton.grpc_url, model, {c.TEXT: "Hi.", c.SPEAKER: np.int64(1)})
    assert stream(triton.grpc_url, model, {c.TEXT: "Still serving.", c.VOICE: TRIO, c.SPEAKER: np.int64(2)})


def test_two_speakers_of_one_voice_on_one_socket_and_a_bad_id_refused(gateway):
    async def run():
        async with connection(gateway) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await client.send(type="config", voice=TRIO, format="pcm_s16le", noise_scale=0, noise_w=0)
            await client.until("ready")
            await client.send(type="speak", context_id="bad", text=SENTENCE, speaker=3)
            error = await client.until("error", "bad")
            for cid, speaker in (("one", 1), ("two", 2), ("again", 1)):
                await client.send(type="speak", context_id=cid, text=SENTENCE, speaker=speaker)
            ended = set()
            while len(ended) < 3:  # in any order
                ended.add((await client.until("done"))["context_id"])
            return client, error

    client, error = asyncio.run(run())
    assert (error["code"], error["message"]) == (v1.INVALID_FIELD, f"speaker 3: voice {TRIO} has 3 speakers, 0 to 2")
    starts = {m["context_id"]: (m["voice"], m["speaker"]) for m in client.messages("audio_start")}
    assert starts == {"one": (TRIO, 1), "two": (TRIO, 2), "again": (TRIO, 1)}
    one, two, again = (pcm(b"".join(f.payload for f in client.audio(cid))) for cid in ("one", "two", "again"))
    # Noiseless, a speaker sounds the same every time, up to where load put chunk joins.
    assert snr_db(one, again) > 40
    assert sound_different(one, two)


def test_the_http_api_lists_speakers_and_speaks_as_the_one_asked_for(gateway):
    base = gateway.replace("ws://", "http://").rsplit("/v1/", 1)[0] + "/v1"
    with urllib.request.urlopen(base + "/voices") as r:
        listed = {v["id"]: v for v in json.loads(r.read())["voices"]}
    assert (listed[TRIO]["speakers"], listed[TRIO]["speaker_ids"]) == (3, {"ana": 0, "ben": 1, "cy": 2})
    assert listed[c.DEFAULT_VOICE]["speakers"] == 1 and "speaker_ids" not in listed[c.DEFAULT_VOICE]
    api = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)

    def speak(**extra):
        return api.audio.speech.create(model="tts-1", voice=TRIO, input=SENTENCE, response_format="pcm",
                                       extra_body={"noise_scale": 0, "noise_w": 0} | extra).content

    first, second, default, zero = (pcm(speak(**extra)) for extra in ({"speaker": 2}, {"speaker": 2}, {}, {"speaker": 0}))
    assert snr_db(first, second) > 40 and snr_db(default, zero) > 40
    assert sound_different(first, default)
    with pytest.raises(openai.BadRequestError) as refused:
        speak(speaker=7)
    assert refused.value.body["param"] == "speaker"
    assert refused.value.body["message"] == f"speaker 7: voice {TRIO} has 3 speakers, 0 to 2"
