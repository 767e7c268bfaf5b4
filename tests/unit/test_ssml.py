"""gateway/conversation/ssml.py: SSML read into text at rates and pauses, each element, nesting, errors
naming the element, and what is unsupported read as text."""

import pytest

from contract import models as c
from contract.text import Sentence, split_sentences
from gateway.backends.synthesis import tts_request
from gateway.conversation.ssml import Pause, Spoken, SsmlError, looks_like_ssml, read_ssml, with_phonemes


def speak(body: str) -> list:
    return read_ssml(f'<speak version="1.0" xmlns="http://www.w3.org/2001/10/synthesis">{body}</speak>')


def test_plain_text_with_breaks_by_time_and_strength():
    assert speak('Hello.<break time="500ms"/>Again.<break time="1.5s"/>And <break strength="weak"/>on.'
                 '<break/>End.') == [Spoken("Hello."), Pause(500), Spoken("Again."), Pause(1500), Spoken("And "),
                                     Pause(500), Spoken("on."), Pause(750), Spoken("End.")]


def test_prosody_rates_nest_and_multiply():
    assert speak('Normal <prosody rate="x-slow">slow <prosody rate="200%">back</prosody></prosody> normal.') == [
        Spoken("Normal "), Spoken("slow ", 0.5), Spoken("back normal.")]  # text at one rate again joins
    assert speak('<prosody rate="+50%">a</prosody><prosody rate="-20%">b</prosody><prosody rate="1.2">c</prosody>') \
        == [Spoken("a", 1.5), Spoken("b", 0.8), Spoken("c", 1.2)]


def test_say_as_reads_the_words_meant():
    said = speak('<say-as interpret-as="characters">AB1</say-as>, <say-as interpret-as="cardinal">1,234</say-as>, '
                 '<say-as interpret-as="ordinal">22</say-as>, <say-as interpret-as="ordinal">11</say-as>, '
                 '<say-as interpret-as="date" format="dmy">05/03/2024</say-as>, '
                 '<say-as interpret-as="telephone">555-0134</say-as>.')
    assert said == [Spoken("A B 1, 1234, 22nd, 11th, March 5th 2024, 5 5 5, 0 1 3 4.")]


def test_sub_reads_its_alias_and_p_and_s_end_sentences():
    assert speak('<p><s>The <sub alias="World Wide Web">WWW</sub> is big</s><s>it is</s></p><p>Next</p>') == [
        Spoken("The World Wide Web is big"), Spoken("it is"), Spoken("Next")]


def test_phoneme_gives_the_ipa_of_its_text_as_a_span_of_the_stretch_read():
    said = speak('I say <phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phoneme>, <phoneme ph="ˈhɛloʊ"> hi </phoneme>.')
    assert said == [Spoken("I say tomato,  hi .", 1.0, ((6, 12, "təˈmɑːtoʊ"), (15, 17, "ˈhɛloʊ")))]
    slow = speak('A <prosody rate="slow">b <phoneme ph="siː">c</phoneme></prosody>')
    assert slow == [Spoken("A "), Spoken("b c", 0.64, ((2, 3, "siː"),))]


def test_each_sentence_gets_the_ipa_spans_within_it_and_a_span_across_sentences_is_read_as_text():
    (said,) = speak('I say <phoneme ph="təˈmɑːtoʊ">tomato</phoneme>. You say <phoneme ph="x">tomato</phoneme>. '
                    '<phoneme ph="y">Not. Here</phoneme>.')
    first, second, third, fourth = with_phonemes(split_sentences(said.text), said, 0)
    assert (first.text, first.phonemes) == ("I say tomato.", ((6, 12, "təˈmɑːtoʊ"),))
    assert (second.text, second.phonemes) == ("You say tomato.", ((8, 14, "x"),))
    assert third.phonemes == fourth.phonemes == ()
    (moved,) = with_phonemes([Sentence(10, 23, "I say tomato.")], said, 10)  # the stretch starts 10 in
    assert moved.phonemes == first.phonemes


def test_phonemes_go_to_tts_and_not_to_the_ar_family_which_reads_the_text():
    def inputs(model, *sentences):
        request = tts_request(sentences, ((c.LENGTH_SCALE, 2.0),), model=model)
        return {i.name(): i for i in request["inputs"]}

    given = Sentence(0, 13, "I say tomato.", ((6, 12, "təˈmɑːtoʊ"),))
    sent = inputs(c.TTS_MODEL, given, Sentence(14, 17, "Hi."))
    assert sent[c.PHONEMES].shape() == [2]
    assert c.PHONEMES not in inputs(c.TTS_MODEL, Sentence(0, 3, "Hi."))
    ar = inputs(c.TTS_AR_MODEL, given)
    assert c.PHONEMES not in ar and c.LENGTH_SCALE not in ar  # nor a rate: it speaks at its own pace


def test_what_is_not_supported_is_read_as_text():
    said = speak('<phoneme alphabet="x-sampa" ph="t@\'meItoU">tomato</phoneme> <emphasis>now</emphasis> '
                 '<say-as interpret-as="interjection">wow</say-as> <prosody pitch="high">up</prosody> '
                 '<voice name="x"><mark name="m"/>inside</voice>')
    assert said == [Spoken("tomato now wow up inside")]


@pytest.mark.parametrize("document,names", [
    ("<speak>Unclosed <break></speak>", "not well-formed"),
    ("<speech>Hi</speech>", "<speak>, not <speech>"),
    ('<speak><break time="abc"/></speak>', '<break time="abc">'),
    ('<speak><break time="11s"/></speak>', '<break time="11s">: at most 10000 ms'),
    ('<speak><break strength="huge"/></speak>', '<break strength="huge">'),
    ('<speak><prosody rate="fastest">x</prosody></speak>', '<prosody rate="fastest">'),
    ('<speak><prosody rate="x-fast"><prosody rate="x-fast"><prosody rate="x-fast">x</prosody></prosody></prosody>'
     '</speak>', "comes to 8"),
    ('<speak><say-as interpret-as="cardinal">many</say-as></speak>', '<say-as interpret-as="cardinal">'),
    ('<speak><say-as interpret-as="date" format="mdy">13/40/2024</say-as></speak>', "no such month"),
    ('<!DOCTYPE lol [<!ENTITY a "aaaa">]><speak>&a;</speak>', "document type or entities"),
    ("<speak><phoneme>a</phoneme></speak>", "<phoneme>: ph, the phonemes in IPA, is required"),
    (f'<speak><phoneme ph="{"a" * 301}">a</phoneme></speak>', "<phoneme>: ph may hold 300 characters at most"),
    ('<speak><phoneme ph="h3lo">a</phoneme></speak>', "<phoneme ph=\"h3lo\">: '3' is no IPA symbol"),
    ("<speak>" + '<break time="10s"/>' * 7 + "</speak>", "add up to 60 s at most"),  # not hours of silence
])
def test_invalid_ssml_is_refused_naming_the_element(document, names):
    with pytest.raises(SsmlError, match=names.replace("(", r"\(")):
        read_ssml(document)


def test_an_ssml_document_is_told_from_plain_text():
    assert looks_like_ssml('  <speak>Hi</speak>') and not looks_like_ssml("I <speak> softly.")
