"""Speech for the recognizer's checks: text spoken whole by the embedded voice, in
process, at the recognizer's rate; and the word error rate of a transcript. Used by the
tests and by perf/voice.py."""

from __future__ import annotations

import functools
import re

import numpy as np
import soxr

from contract import models as c
from contract.text import split_sentences
from python_backends.piper.engines import AcousticEngine, VocoderEngine
from python_backends.piper.inputs import VoiceParams
from python_backends.piper.voice import load_voice


@functools.cache
def _engines() -> tuple[AcousticEngine, VocoderEngine, int]:
    voice = load_voice()
    return AcousticEngine(voice), VocoderEngine(voice), voice.sample_rate


def spoken(text: str, rate: int = c.ASR_SAMPLE_RATE) -> np.ndarray:
    """`text` spoken by the embedded voice, sentence after sentence, as int16 PCM at `rate`."""
    acoustic, vocoder, voice_rate = _engines()
    params = VoiceParams(1.0, 0.667, 0.8)
    pcm = np.concatenate([vocoder.vocode(acoustic.latent(s, params).latent[None])[0] for s in split_sentences(text)])
    pcm = soxr.resample(pcm, voice_rate, rate)
    return (np.clip(pcm, -1, 1) * 32767).astype(np.int16)


def silence(seconds: float, rate: int = c.ASR_SAMPLE_RATE) -> np.ndarray:
    return np.zeros(round(seconds * rate), np.int16)


def words(text: str) -> list[str]:
    """A transcript's words, compared without case or punctuation."""
    return re.findall(r"[a-z0-9']+", text.lower().replace("\u2019", "'"))


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) ÷ the reference's words."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[-1] / max(1, len(ref))
