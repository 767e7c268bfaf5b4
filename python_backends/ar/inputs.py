"""The autoregressive family's requests, read and checked once: `tts_ar` (an Orpheus voice,
sentences, sampling, chunking) and `talker` (one sentence, or a STOP). No Triton here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from contract.models import (
    AR_CHUNK_PARAMS,
    AR_PARAMS,
    GUIDANCE_SCALE,
    MAX_FRAMES,
    MAX_SENTENCE_CHARS,
    ORPHEUS_VOICES,
    SEED,
    STOP,
    STREAM_ID,
    TEMPERATURE,
    VOICE,
    InvalidRequest,
)
from contract.text import Sentence
from python_backends.chunking import ChunkParams
from python_backends.inputs import decode, read_chunk_params, read_params, read_sentences, read_text


@dataclass(frozen=True)
class TalkerParams:
    """One stream's sampling (the contract's AR_PARAMS): greedy at temperature 0,
    repeatable with a seed; top_p and the repetition penalty are Orpheus's own."""

    temperature: float
    max_frames: int
    seed: int | None = None
    top_p: float = 0.95
    repetition_penalty: float = 1.1
    guidance_scale: float | None = None  # None: one request, unguided

    def tensors(self) -> dict[str, np.ndarray]:
        """The parameters as the `talker` model's inputs (those that are set)."""
        values = {TEMPERATURE: self.temperature, MAX_FRAMES: self.max_frames, SEED: self.seed,
                  GUIDANCE_SCALE: self.guidance_scale}
        return {p.name: np.array([values[p.name]], dtype=p.dtype) for p in AR_PARAMS if values[p.name] is not None}


@dataclass(frozen=True)
class TalkerRequest:
    """A checked `talker` request: a sentence, its voice and sampling."""

    text: str
    voice: str
    params: TalkerParams
    stream_id: str | None  # the name a STOP request may stop it by


@dataclass(frozen=True)
class TtsArRequest:
    """A checked `tts_ar` request."""

    sentences: tuple[Sentence, ...]
    voice: str
    params: TalkerParams
    chunking: ChunkParams


def read_orpheus_voice(inputs: Mapping[str, np.ndarray]) -> str:
    """The Orpheus voice VOICE names (the first of them without it)."""
    if VOICE not in inputs:
        return ORPHEUS_VOICES[0]
    raw = inputs[VOICE].reshape(-1)
    name = decode(VOICE, raw[0]) if raw.size == 1 else ""
    if name not in ORPHEUS_VOICES:
        raise InvalidRequest(f"{VOICE} must be one of the Orpheus voices ({', '.join(ORPHEUS_VOICES)}), got {name!r}")
    return name


def read_talker_params(inputs: Mapping[str, np.ndarray]) -> TalkerParams:
    v = read_params(inputs, AR_PARAMS)
    return TalkerParams(temperature=v[TEMPERATURE], max_frames=v[MAX_FRAMES], seed=v[SEED],
                        guidance_scale=v[GUIDANCE_SCALE])


def read_talker_request(inputs: Mapping[str, np.ndarray]) -> TalkerRequest | str:
    """A sentence to speak, or the name of a stream to stop (STOP with its STREAM_ID)."""
    stream = decode(STREAM_ID, inputs[STREAM_ID].reshape(-1)[0]) if STREAM_ID in inputs else None
    if STOP in inputs and bool(inputs[STOP].reshape(-1)[0]):
        if not stream:
            raise InvalidRequest(f"{STOP} needs the {STREAM_ID} of the stream to stop")
        return stream
    params = read_talker_params(inputs)
    return TalkerRequest(read_text(inputs, MAX_SENTENCE_CHARS), read_orpheus_voice(inputs), params, stream)


def read_tts_ar_request(inputs: Mapping[str, np.ndarray], max_chars: int) -> TtsArRequest:
    """A `tts_ar` request's voice, sentences (read_sentences, English rules), sampling
    and chunking, all checked before any work starts."""
    voice = read_orpheus_voice(inputs)
    sentences = read_sentences(inputs, max_chars)
    return TtsArRequest(sentences, voice, read_talker_params(inputs), read_chunk_params(inputs, AR_CHUNK_PARAMS))
