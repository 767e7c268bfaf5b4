"""SSML over both protocols against the real server (gateway/conversation/ssml.py, docs/protocol.md#ssml):
breaks are silence where they stand and move the next words' timestamps by their
length, a slower rate makes its text longer, aliases and say-as are the words spoken, a
<phoneme> is spoken as its IPA, and invalid SSML is refused naming the element with the connection going on."""

import asyncio
import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from speechstream import protocol as v1
from speechstream.client import SpeechClient, SpeechError
from tests.audio import snr_db
from tests.integration.test_speech_http import base_url

RATE = 24000
SEED = 5


async def spoken(gateway: str, text: str, ssml: bool, **config) -> tuple[np.ndarray, list[dict], dict]:
    """The PCM, the timestamps messages and the `done` of one speak."""
    async with await SpeechClient.connect(gateway, format="pcm_s16le", sample_rate=RATE, timestamps=True,
                                          seed=SEED, **config) as client:
        context = client.context()
        await context.speak(text, ssml=ssml)
        events = [e async for e in context.events()]
    pcm = np.frombuffer(b"".join(e.frame.payload for e in events if e.frame is not None), "<i2")
    return pcm, [e.message for e in events if e.kind == "timestamps"], events[-1].message


def speak(gateway: str, text: str, ssml: bool = True, **config):
    return asyncio.run(spoken(gateway, text, ssml, **config))


def first_start_ms(stamps: list[dict], word: str) -> int:
    return next(m["start_ms"][m["words"].index(word)] for m in stamps if word in m["words"])


def test_a_break_is_silence_where_it_stands_and_moves_the_next_words_by_its_length(gateway):
    plain_pcm, plain, _ = speak(gateway, "Hello there. How are you?", ssml=False)
    pcm, stamps, done = speak(gateway, '<speak>Hello there.<break time="1s"/>How are you?</speak>')
    moved = first_start_ms(stamps, "How") - first_start_ms(plain, "How")
    assert 950 <= moved <= 1100, moved  # the break (and the join of two requests instead of one)
    there_ends = next(m["end_ms"][-1] for m in stamps if "there." in m["words"])  # words keep their punctuation
    gap = pcm[round(there_ends * RATE / 1000) + RATE // 20:][:round(0.9 * RATE)]
    assert len(gap) == round(0.9 * RATE) and np.abs(gap.astype(np.int32)).max() < 100  # the break, silent
    assert done["audio_ms"] == pytest.approx(len(pcm) * 1000 / RATE, abs=25)
    assert len(pcm) - len(plain_pcm) >= 0.95 * RATE


def test_a_slower_rate_makes_its_text_longer_and_a_faster_shorter(gateway):
    plain = speak(gateway, "The quick brown fox jumps over the lazy dog.", ssml=False)[2]["audio_ms"]
    slow = speak(gateway, '<speak><prosody rate="x-slow">The quick brown fox jumps over the lazy dog.</prosody></speak>')
    fast = speak(gateway, '<speak><prosody rate="200%">The quick brown fox jumps over the lazy dog.</prosody></speak>')
    assert 1.6 <= slow[2]["audio_ms"] / plain <= 2.4
    assert 0.4 <= fast[2]["audio_ms"] / plain <= 0.65


def test_aliases_and_say_as_are_the_words_spoken(gateway):
    _, stamps, _ = speak(gateway, '<speak>The <sub alias="World Wide Web">WWW</sub> has '
                                  '<say-as interpret-as="characters">ABC</say-as>.</speak>')
    words = [w for m in stamps for w in m["words"]]
    assert words[:6] == ["The", "World", "Wide", "Web", "has", "A"] and "WWW" not in words


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """The same audio, but for float rounding."""
    return a.size == b.size and snr_db(a.astype(np.float32), b.astype(np.float32)) > 40


def test_phoneme_speaks_its_ipa_instead_of_the_texts_reading_and_times_the_texts_word(gateway):
    """Without noise (noise_scale and noise_w 0) the audio depends on the phonemes alone:
    two words given the same IPA sound the same, and unlike their plain reading."""
    quiet = {"noise_scale": 0.0, "noise_w": 0.0}

    def said(word: str, ph: str | None) -> tuple[np.ndarray, list[dict]]:
        inner = word if ph is None else f'<phoneme alphabet="ipa" ph="{ph}">{word}</phoneme>'
        pcm, stamps, _ = speak(gateway, f"<speak>I say {inner} often.</speak>", **quiet)
        return pcm, stamps

    tomato, _ = said("tomato", None)
    potato, _ = said("potato", None)
    british_tomato, stamps = said("tomato", "təˈmɑːtoʊ")
    british_potato, _ = said("potato", "təˈmɑːtoʊ")
    assert [w for m in stamps for w in m["words"]] == ["I", "say", "tomato", "often."]  # the text's word, timed
    assert not same(tomato, potato)
    assert same(british_tomato, british_potato)
    assert not same(british_tomato, tomato)


def test_invalid_ssml_is_refused_naming_the_element_and_the_connection_goes_on(gateway):
    async def run():
        async with await SpeechClient.connect(gateway, format="pcm_s16le", sample_rate=RATE) as client:
            bad = client.context()
            await bad.speak('<speak>Soon<break time="later"/></speak>', ssml=True)
            with pytest.raises(SpeechError) as refused:
                [e async for e in bad.events()]
            return refused.value, [f async for f in client.speak("Still here.")]

    error, frames = asyncio.run(run())
    assert error.code == v1.INVALID_SSML and '<break time="later">' in str(error)
    assert frames


def post(gateway: str, **fields) -> tuple[int, bytes]:
    body = json.dumps({"model": "tts-1", "voice": "alloy", "response_format": "pcm", "seed": SEED, **fields}).encode()
    request = urllib.request.Request(base_url(gateway) + "/audio/speech", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_over_http_a_speak_document_is_read_as_ssml_with_its_break_and_errors_name_the_element(gateway):
    _, plain = post(gateway, input="Hello there. How are you?")
    status, with_break = post(gateway, input='<speak>Hello there.<break time="2s"/>How are you?</speak>')
    assert status == 200 and 1.9 * RATE <= (len(with_break) - len(plain)) / 2 <= 2.4 * RATE
    status, as_text = post(gateway, input="<speak>Hello there.</speak>", ssml=False)  # the tags read as text
    assert status == 200 and as_text
    _, plain = post(gateway, input="I say tomato often.")
    status, given = post(gateway, input='<speak>I say <phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phoneme> often.'
                                        '</speak>')  # the same text and seed: only the phonemes differ
    assert status == 200 and given != plain
    status, body = post(gateway, input='<speak><prosody rate="warp">Hi</prosody></speak>')
    error = json.loads(body)["error"]
    assert status == 400 and error["param"] == "input" and '<prosody rate="warp">' in error["message"]
