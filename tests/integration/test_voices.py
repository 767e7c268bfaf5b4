"""Two voices in two languages on one server: the embedded English voice and a German one
built from it (tests/voices.py), each with its own phonemes, sentence rules and rate,
over protocol v1 (both on one socket) and over the OpenAI HTTP API."""

import asyncio
import json
import urllib.request
from dataclasses import replace

import numpy as np
import openai
import pytest

from contract.text import split_sentences
from contract.voices import EMBEDDED, find_voices
from python_backends.piper.engines import AcousticEngine
from python_backends.piper.voice import load_voice
from speechstream.client import connection
from tests.recorder import Recorder
from tests.voices import GERMAN, GERMAN_RATE

SEED = 7
ENGLISH_TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
# By German rules two sentences; by English ones "3." and "z. B." would end sentences.
GERMAN_TEXT = "Am 3. Oktober ist Feiertag. Das ist z. B. gut."


@pytest.fixture(scope="module")
def expected_ms(voices_dir):
    """Each voice's audio length for its text, from the acoustic stage in process: its
    sentences by its language's rules, its frames at its own rate, with the same seed."""
    def ms(info, text):
        engine = AcousticEngine(load_voice(info))
        params = replace(engine.default_params(), seed=SEED)
        sentences = split_sentences(text, language=info.language_family)
        frames = sum(engine.prior(s, params).frames for s in sentences)
        return frames * 256 * 1000 / info.sample_rate, [s.text for s in sentences]

    voices = find_voices(voices_dir)
    return {EMBEDDED.name: ms(EMBEDDED, ENGLISH_TEXT), GERMAN: ms(voices[GERMAN], GERMAN_TEXT)}


def test_split_by_german_rules_the_german_text_is_two_sentences_and_by_english_more():
    assert len(split_sentences(GERMAN_TEXT, language="de")) == 2
    assert len(split_sentences(GERMAN_TEXT, language="en")) > 2


def test_two_voices_in_two_languages_on_one_socket(gateway, expected_ms):
    async def run():
        async with connection(gateway) as ws:
            client = Recorder(ws)
            ready = await client.until("ready")
            await client.send(type="config", seed=SEED, timestamps=True)
            ready = await client.until("ready")
            await client.send(type="speak", context_id="en", text=ENGLISH_TEXT)
            await client.send(type="speak", context_id="de", text=GERMAN_TEXT, voice=GERMAN)
            done = {cid: await client.received("done", cid) for cid in ("en", "de")}  # in either order
            return ready, client, done

    ready, client, done = asyncio.run(run())
    assert ready["voices"][:2] == [EMBEDDED.name, GERMAN]  # the default first, then the directory's by name
    starts = {m["context_id"]: m for m in client.messages("audio_start")}
    assert (starts["en"]["voice"], starts["de"]["voice"]) == (EMBEDDED.name, GERMAN)
    assert starts["de"]["sample_rate"] == starts["en"]["sample_rate"] == 48000  # each resampled from its own rate
    for cid, voice in (("en", EMBEDDED.name), ("de", GERMAN)):
        ms, sentences = expected_ms[voice]
        assert abs(done[cid]["audio_ms"] - ms) <= 2, cid
        spans = [m["text_span"] for m in client.messages("timestamps") if m["context_id"] == cid]
        text = ENGLISH_TEXT if cid == "en" else GERMAN_TEXT
        assert [text[a:b] for a, b in spans] == sentences
        assert client.audio(cid)


def test_the_http_api_lists_and_speaks_each_voice(gateway, expected_ms):
    base = gateway.replace("ws://", "http://").rsplit("/v1/", 1)[0] + "/v1"
    with urllib.request.urlopen(base + "/voices") as r:
        listed = json.loads(r.read())["voices"]
    assert [(v["id"], v["sample_rate"], v["language"]) for v in listed][:2] == [
        (EMBEDDED.name, EMBEDDED.sample_rate, "en_US"), (GERMAN, GERMAN_RATE, "de_DE")]
    api = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)
    for voice, text in ((GERMAN, GERMAN_TEXT), (EMBEDDED.name, ENGLISH_TEXT)):
        body = api.audio.speech.create(model="tts-1", voice=voice, input=text, response_format="pcm",
                                       extra_body={"seed": SEED}).content
        pcm = np.frombuffer(body, np.int16)
        assert np.abs(pcm).max() > 1000
        assert 0 <= pcm.size / 24 - expected_ms[voice][0] <= 20  # the last 20 ms frame is padded
