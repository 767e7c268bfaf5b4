"""Speech for the recognizer's checks: text spoken by the embedded voice in process, as
a microphone would send it (int16, 16 kHz unless asked otherwise), and transcripts
compared word by word. Used by the tests and by perf/voice/asr.py and perf/voice/end_to_end.py."""

from __future__ import annotations

import asyncio
import functools
import re
import time

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


def spoken(text: str, rate: int = ASR_SAMPLE_RATE, seed: int = 1) -> np.ndarray:
    """`text` in the embedded voice (its own scales, a fixed seed), int16 at `rate`."""
    acoustic, vocoder, voice_rate = _engines()
    params = acoustic.default_params()
    params = type(params)(params.length_scale, params.noise_scale, params.noise_w, seed)
    pcm = np.concatenate([vocoder.vocode(acoustic.latent(s, params).latent[None])[0] for s in split_sentences(text)])
    return (np.clip(soxr.resample(pcm, voice_rate, rate), -1, 1) * 32767).astype(np.int16)


def silence(ms: int, rate: int = ASR_SAMPLE_RATE) -> np.ndarray:
    return np.zeros(ms * rate // 1000, np.int16)


def words(text: str) -> list[str]:
    """The words as said: lower case, no punctuation, hyphens as spaces."""
    return re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("\u2019", "'").replace("-", " ")).split()


def word_errors(reference: str, heard: str) -> int:
    """Words substituted, left out or added (the edit distance over words)."""
    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[:], i
        for j, h in enumerate(hyp, 1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (r != h))
    return row[-1]


def word_error_rate(reference: str, heard: str) -> float:
    """word_errors ÷ the reference's words."""
    return word_errors(reference, heard) / max(1, len(words(reference)))


MESSAGE_MS = 20  # a microphone's message, as browsers' audio callbacks send them


async def say(ws, audio: np.ndarray, rate: int = ASR_SAMPLE_RATE, then_until: asyncio.Event | None = None) -> float:
    """Send `audio` up `ws` as a microphone does, MESSAGE_MS a message in real time, then
    silence until `then_until` is set (when given); return when the audio's last message went out."""
    step = rate * MESSAGE_MS // 1000
    start, sent, said_at = time.perf_counter(), 0, 0.0
    while sent < audio.size or (then_until is not None and not then_until.is_set()):
        await asyncio.sleep(max(0.0, start + sent / rate - time.perf_counter()))
        await ws.send((audio[sent:sent + step] if sent < audio.size else np.zeros(step, np.int16)).tobytes())
        sent += step
        said_at = said_at if sent - step >= audio.size else time.perf_counter()
    return said_at
