"""The Piper family's PHONEMES input (contract.models.PHONEMES): IPA for spans of a
sentence, read and checked, spoken instead of espeak-ng's reading, the words still timed."""

import asyncio

import numpy as np
import pytest

from contract import models as c
from contract.text import Sentence
from python_backends.piper.inputs import parse_phonemes, read_tts_request
from python_backends.piper.phonemes import ipa, phoneme_ids, with_given
from tests.audio import snr_db
from tests.engine_stages import EngineStages, stream_request, strings


@pytest.mark.parametrize("value,says", [
    ("not json", "is not JSON"),
    ('{"a": 1}', "must be a list"),
    ("[[0, 2]]", "is not [start, end, ipa]"),
    ('[[0, 2.5, "a"]]', "is not [start, end, ipa]"),
    ('[[3, 2, "a"]]', "is not within the sentence's 6 characters"),
    ('[[0, 7, "a"]]', "is not within"),
    ('[[2, 4, "a"], [3, 5, "b"]]', "after the span before it"),
    ('[[0, 2, " "]]', "must be 1 to 300 characters"),
])
def test_phonemes_that_do_not_fit_their_sentence_are_refused_saying_why(value, says):
    with pytest.raises(c.InvalidRequest) as e:
        parse_phonemes(value, "tomato")
    assert says in str(e.value)


def test_phonemes_are_read_one_per_sentence_and_only_beside_sentences():
    inputs = {c.SENTENCES: strings("I say tomato.", "Hi."), c.PHONEMES: strings('[[6, 12, "təˈmɑːtoʊ"]]', "")}
    request = read_tts_request(inputs, 1000)
    assert [s.phonemes for s in request.sentences] == [((6, 12, "təˈmɑːtoʊ"),), ()]
    assert read_tts_request({c.SENTENCES: strings("Hi.")}, 1000).sentences[0].phonemes == ()
    with pytest.raises(c.InvalidRequest, match="one element per sentence"):
        read_tts_request({**inputs, c.PHONEMES: strings("")}, 1000)
    with pytest.raises(c.InvalidRequest, match="goes with SENTENCES"):
        read_tts_request({c.TEXT: strings("Hi."), c.PHONEMES: strings("")}, 1000)
    spans = ((1, 2, "a"), (3, 5, "ɡb"))
    assert parse_phonemes(c.encode_phonemes(spans), "abcdef") == spans
    assert c.encode_phonemes(()) == "" and parse_phonemes("[]", "x") == ()


def test_given_ipa_stands_as_a_word_between_the_texts_phonemes_and_keeps_its_punctuation():
    def phonemize(part):
        return f"<{part}>"

    assert with_given("I say tomato often.", ((6, 12, "təˈmɑːtoʊ"),), phonemize) == "<I say> təˈmɑːtoʊ <often.>"
    assert with_given("tomato, then.", ((0, 6, "x"),), phonemize) == "x, <then.>"
    assert with_given("I say it.", ((6, 8, "ɪt"),), phonemize) == "<I say> ɪt."
    assert with_given("plain", (), phonemize) == "<plain>"
    assert ipa(" ʧeɪnʤ  'gɑ:d ") == "tʃeɪndʒ ˈɡɑːd"


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """The same audio, but for float rounding (the first sentence's flow runs in pieces)."""
    return a.size == b.size and snr_db(a, b) > 60


@pytest.fixture(scope="module")
def engines():
    from python_backends.piper.engines import AcousticEngine, VocoderEngine
    from python_backends.piper.voice import load_voice

    voice = load_voice()
    return AcousticEngine(voice), VocoderEngine(voice)


def test_the_talker_speaks_the_given_ipa_instead_of_the_texts_reading_and_times_the_texts_word(engines):
    """Without noise the audio is the phonemes' alone: two words given the same IPA
    sound the same, and unlike their own readings."""
    acoustic, vocoder = engines
    sentences = ("I say tomato often.", "I say potato often.")
    quiet = {c.NOISE_SCALE: np.array([0.0], np.float32), c.NOISE_W: np.array([0.0], np.float32)}

    def audio(phonemes):
        inputs = {c.SENTENCES: strings(*sentences), **quiet}
        if phonemes:
            inputs[c.PHONEMES] = strings(*phonemes)
        chunks = asyncio.run(stream_request(EngineStages(acoustic, vocoder), inputs))
        pcm = [np.concatenate([x.pcm for x in chunks if x.sentence_index == i]) for i in (0, 1)]
        words = [w for x in chunks for w in x.words]
        return pcm, words

    (tomato, potato), _ = audio(None)
    given = '[[6, 12, "təˈmɑːtoʊ"]]'
    (british_tomato, british_potato), words = audio([given, given])
    assert not same(tomato, potato)
    assert same(british_tomato, british_potato) and not same(british_tomato, tomato)
    assert [w for w, _, _ in words] == ["I", "say", "tomato", "often.", "I", "say", "potato", "often."]
    ids = acoustic.ids(Sentence(0, 19, sentences[0]), ((6, 12, "təˈmɑːtoʊ"),))
    assert ids.tolist() == phoneme_ids("aɪ sˈeɪ təˈmɑːtoʊ ˈɔfən.", acoustic.voice.phoneme_id_map)
