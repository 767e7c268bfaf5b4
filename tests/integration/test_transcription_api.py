"""OpenAI's `POST /v1/audio/transcriptions` end to end, driven by the official `openai`
package: two sentences spoken by the embedded voice (in process) with a pause between
them, written as WAV, Ogg/Opus and mp3, transcribed by Triton's recognizer through a
gateway with --listen. Its words (at most 10 % of them wrong), its segments where the
sentences are, every response_format, and its refusals as the SDK raises them."""

import numpy as np
import openai
import pytest

from tests.audio import encode_file
from tests.speech import silence, spoken, word_error_rate

SENTENCES = (
    "What is your favorite kind of music to listen to on a rainy day?",
    "I would like to book a table for two people at seven tonight.",
)
RATE = 22050  # the file's: the server resamples it to the recognizer's 16 kHz
LEAD_MS, GAP_MS = 700, 1500  # silence before the first sentence, and between them
START_SLACK_S, END_SLACK_S = 0.4, 0.6  # a segment's start and end, against where its sentence's audio lies


@pytest.fixture(scope="module")
def speech():
    """The sentences spoken with a pause between them: (int16 PCM at RATE, [(start, end)]
    of each sentence's audio in seconds)."""
    pieces, spans, at = [silence(LEAD_MS, RATE)], [], LEAD_MS / 1000
    for sentence in SENTENCES:
        pcm = spoken(sentence, RATE)
        spans.append((at, at + pcm.size / RATE))
        pieces += [pcm, silence(GAP_MS, RATE)]
        at += pcm.size / RATE + GAP_MS / 1000
    return np.concatenate(pieces), spans


@pytest.fixture(scope="module")
def sdk(listen_gateway):
    return openai.OpenAI(base_url=f"{listen_gateway.http}/v1", api_key="unused", max_retries=0)


def transcribe(sdk, data: bytes, name: str, **options):
    return sdk.audio.transcriptions.create(model="whisper-1", file=(name, data), **options)


@pytest.mark.parametrize("fmt", ["wav", "ogg", "mp3"])
def test_the_sdk_gets_the_words_of_each_format(sdk, speech, fmt):
    pcm, _ = speech
    text = transcribe(sdk, encode_file(pcm, RATE, fmt), f"speech.{fmt}").text
    assert word_error_rate(" ".join(SENTENCES), text) <= 0.1, text


def test_verbose_json_has_a_segment_per_sentence_where_it_is_spoken(sdk, speech):
    pcm, spans = speech
    verbose = transcribe(sdk, encode_file(pcm, RATE, "wav"), "speech.wav", response_format="verbose_json")
    assert verbose.language == "english" and verbose.duration == pytest.approx(pcm.size / RATE, abs=0.01)
    assert word_error_rate(" ".join(SENTENCES), verbose.text) <= 0.1, verbose.text
    assert len(verbose.segments) == len(SENTENCES), verbose.segments
    for segment, sentence, (start, end) in zip(verbose.segments, SENTENCES, spans):
        assert word_error_rate(sentence, segment.text) <= 0.2, segment.text
        assert abs(segment.start - start) <= START_SLACK_S and abs(segment.end - end) <= END_SLACK_S, (segment, start, end)


def test_text_and_subtitles(sdk, speech):
    pcm, spans = speech
    data = encode_file(pcm, RATE, "ogg")
    text = transcribe(sdk, data, "speech.ogg", response_format="text")
    assert isinstance(text, str) and text.endswith("\n") and word_error_rate(" ".join(SENTENCES), text) <= 0.1
    srt = transcribe(sdk, data, "speech.ogg", response_format="srt")
    cues = srt.strip().split("\n\n")
    assert [cue.splitlines()[0] for cue in cues] == ["1", "2"] and " --> " in cues[0].splitlines()[1]
    assert transcribe(sdk, data, "speech.ogg", response_format="vtt").startswith("WEBVTT\n\n")


def test_silence_is_an_empty_transcript(sdk):
    verbose = transcribe(sdk, encode_file(silence(2000, RATE), RATE, "wav"), "quiet.wav", response_format="verbose_json")
    assert verbose.text == "" and verbose.segments == [] and verbose.duration == pytest.approx(2.0, abs=0.01)


def test_a_file_that_is_no_audio_and_a_language_not_served_are_bad_requests(sdk, speech):
    with pytest.raises(openai.BadRequestError) as bad:
        transcribe(sdk, b"this is not audio " * 100, "notes.wav")
    assert "could not decode the audio file" in bad.value.message and bad.value.body["param"] == "file"
    with pytest.raises(openai.BadRequestError) as foreign:
        transcribe(sdk, encode_file(speech[0][:RATE], RATE, "wav"), "speech.wav", language="de")
    assert foreign.value.body["param"] == "language"


def test_the_models_are_listed_and_a_gateway_without_a_recognizer_says_so(sdk, gateway):
    assert {"whisper-1", "gpt-4o-transcribe", "speechstream-asr"} <= {m.id for m in sdk.models.list()}
    plain = openai.OpenAI(base_url=gateway.replace("ws://", "http://").replace("/v1/stream", "/v1"), api_key="unused",
                          max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        transcribe(plain, b"RIFF", "speech.wav")
    assert missing.value.body["code"] == "listen_unavailable" and "--listen" in missing.value.message
    assert "whisper-1" not in {m.id for m in plain.models.list()}
