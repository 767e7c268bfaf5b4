"""Speech for the recognizer's tests: text spoken by the embedded voice in process, as a
microphone would send it (16 kHz int16), and transcripts compared word by word."""

from __future__ import annotations

import functools
import re

import numpy as np
import soxr

from contract.models import ASR_SAMPLE_RATE
from contract.text import split_sentences
from python_backends.piper.engines import AcousticEngine, VocoderEngine
from python_backends.piper.voice import load_voice


@functools.cache
def _engines() -> tuple[AcousticEngine, VocoderEngine, int]:
    voice = load_voice()
    return AcousticEngine(voice), VocoderEngine(voice), voice.sample_rate


def spoken(text: str, seed: int = 1) -> np.ndarray:
    """`text` in the embedded voice (its own scales, a fixed seed), int16 at ASR_SAMPLE_RATE."""
    acoustic, vocoder, rate = _engines()
    params = acoustic.default_params()
    params = type(params)(params.length_scale, params.noise_scale, params.noise_w, seed)
    pcm = np.concatenate([vocoder.vocode(acoustic.latent(s, params).latent[None])[0] for s in split_sentences(text)])
    return (np.clip(soxr.resample(pcm, rate, ASR_SAMPLE_RATE), -1, 1) * 32767).astype(np.int16)


def silence(ms: int) -> np.ndarray:
    return np.zeros(ms * ASR_SAMPLE_RATE // 1000, np.int16)


def words(text: str) -> list[str]:
    """The words as said: lower case, no punctuation, hyphens as spaces."""
    return re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " ")).split()


def word_errors(reference: str, heard: str) -> int:
    """Words substituted, left out or added (the edit distance over words)."""
    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[:], i
        for j, h in enumerate(hyp, 1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (r != h))
    return row[-1]
