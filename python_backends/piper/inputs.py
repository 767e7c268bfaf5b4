"""The Piper family's requests, read and checked once: `tts` (a voice, sentences, voice
parameters, chunking) and `acoustic` (one sentence). No Triton here."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np

from contract.models import (
    CHUNK_PARAMS,
    INITIAL_CHUNK_FRAMES,
    LENGTH_SCALE,
    MAX_SENTENCE_CHARS,
    NOISE_SCALE,
    NOISE_W,
    PHONEMES,
    SEED,
    SENTENCES,
    SPEAKER,
    VOICE,
    VOICE_PARAMS,
    InvalidRequest,
    Phonemes,
)
from contract.text import Sentence
from contract.voices import EMBEDDED, EMBEDDED_ONLY, VoiceInfo
from python_backends.chunking import ChunkParams
from python_backends.inputs import decode, read_chunk_params, read_params, read_sentences


@dataclass(frozen=True)
class VoiceParams:
    """Piper's three scales (None: the voice's own), an optional seed for the noise, and
    the speaker."""

    length_scale: float | None = None
    noise_scale: float | None = None
    noise_w: float | None = None
    seed: int | None = None
    speaker: int = 0  # a multi-speaker voice's speaker id

    def over(self, defaults: VoiceParams) -> VoiceParams:
        """These parameters, `defaults`' where these are unset."""
        return replace(self, **{f.name: getattr(defaults, f.name) for f in fields(self) if getattr(self, f.name) is None})

    def tensors(self) -> dict[str, np.ndarray]:
        """The parameters that are set, as the `acoustic` model's inputs."""
        values = {LENGTH_SCALE: self.length_scale, NOISE_SCALE: self.noise_scale, NOISE_W: self.noise_w,
                  SEED: self.seed, SPEAKER: self.speaker}
        return {p.name: np.array([values[p.name]], dtype=p.dtype) for p in VOICE_PARAMS if values[p.name] is not None}


def read_phonemes(inputs: Mapping[str, np.ndarray], sentences: Sequence[str]) -> tuple[Phonemes, ...]:
    """PHONEMES, one element per sentence, checked against the sentences' texts; () each
    without it."""
    if PHONEMES not in inputs:
        return ((),) * len(sentences)
    raw = inputs[PHONEMES].reshape(-1)
    if raw.size != len(sentences):
        raise InvalidRequest(f"{PHONEMES} must hold one element per sentence ({len(sentences)}), got {raw.size}")
    return tuple(parse_phonemes(decode(f"{PHONEMES}[{i}]", value), text, f"{PHONEMES}[{i}]")
                 for i, (value, text) in enumerate(zip(raw, sentences)))


def parse_phonemes(value: str, text: str, name: str = PHONEMES) -> Phonemes:
    """One element of PHONEMES (encode_phonemes' inverse): JSON [[start, end, "ipa"], ...], spans of `text` in order
    and apart, each with its IPA ("" or [] for none); InvalidRequest saying what is wrong."""
    if not value.strip():
        return ()
    try:
        spans = json.loads(value)
    except (ValueError, RecursionError):
        raise InvalidRequest(f"{name} is not JSON") from None
    if not isinstance(spans, list):
        raise InvalidRequest(f"{name} must be a list of [start, end, ipa]")
    checked, at = [], 0
    for span in spans:
        if (not isinstance(span, list) or len(span) != 3 or not all(type(x) is int for x in span[:2])
                or not isinstance(span[2], str)):
            raise InvalidRequest(f"{name}: {str(span)[:50]} is not [start, end, ipa]")
        start, end, ipa = span
        if not at <= start < end <= len(text):
            raise InvalidRequest(f"{name}: span [{start}, {end}) is not within the sentence's {len(text)} characters "
                                 "after the span before it")
        if not ipa.strip() or len(ipa) > MAX_SENTENCE_CHARS:
            raise InvalidRequest(f"{name}: the IPA of [{start}, {end}) must be 1 to {MAX_SENTENCE_CHARS} characters")
        checked.append((start, end, ipa))
        at = end
    return tuple(checked)


@dataclass(frozen=True)
class TtsRequest:
    """A checked `tts` request."""

    sentences: tuple[Sentence, ...]  # each spoken as one sentence, in order
    voice: VoiceInfo
    params: VoiceParams  # as the client set them; the acoustic stage fills in the voice's defaults
    chunking: ChunkParams
    chunking_asked: bool  # the client chose INITIAL_CHUNK_FRAMES, so load does not resize it


def read_voice(inputs: Mapping[str, np.ndarray], voices: Mapping[str, VoiceInfo]) -> VoiceInfo:
    """The voice VOICE names, the default voice without it; one of `voices`."""
    if VOICE not in inputs:
        return EMBEDDED
    raw = inputs[VOICE].reshape(-1)
    name = decode(VOICE, raw[0]) if raw.size == 1 else ""
    if name not in voices:
        raise InvalidRequest(f"{VOICE} must name one of this server's voices ({', '.join(voices)}), got {name!r}")
    return voices[name]


def read_voice_params(inputs: Mapping[str, np.ndarray], voice: VoiceInfo = EMBEDDED) -> VoiceParams:
    """The voice parameters, range-checked; the speaker one of `voice`'s."""
    v = read_params(inputs, VOICE_PARAMS)
    speaker = v[SPEAKER] or 0
    if problem := voice.speaker_problem(speaker):
        raise InvalidRequest(f"{SPEAKER}: {problem}")
    return VoiceParams(v[LENGTH_SCALE], v[NOISE_SCALE], v[NOISE_W], v[SEED], speaker)


def read_tts_request(
    inputs: Mapping[str, np.ndarray], max_chars: int, voices: Mapping[str, VoiceInfo] = EMBEDDED_ONLY
) -> TtsRequest:
    """A `tts` request's voice, sentences (read_sentences), voice parameters and
    chunking, all checked before any work starts."""
    voice = read_voice(inputs, voices)
    sentences = read_sentences(inputs, max_chars, voice.language_family)
    if PHONEMES in inputs and SENTENCES not in inputs:
        raise InvalidRequest(f"{PHONEMES} goes with {SENTENCES}: a span is in one sentence's text")
    phonemes = read_phonemes(inputs, [s.text for s in sentences])
    sentences = tuple(replace(s, phonemes=p) for s, p in zip(sentences, phonemes))
    params = read_voice_params(inputs, voice)
    return TtsRequest(sentences, voice, params, read_chunk_params(inputs, CHUNK_PARAMS), INITIAL_CHUNK_FRAMES in inputs)
