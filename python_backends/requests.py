"""Reading and validating request inputs, from plain numpy arrays (no Triton here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .chunking import ChunkParams
from .contract import (
    AR_CHUNK_PARAMS,
    AR_PARAMS,
    GUIDANCE_SCALE,
    CHUNK_FRAMES,
    CHUNK_PARAMS,
    INITIAL_CHUNK_FRAMES,
    LEFT_CONTEXT_FRAMES,
    LENGTH_SCALE,
    MAX_FRAMES,
    MAX_SENTENCE_CHARS,
    NOISE_SCALE,
    NOISE_W,
    RIGHT_CONTEXT_FRAMES,
    SEED,
    SENTENCES,
    SPEAKER,
    STOP,
    STREAM_ID,
    TEMPERATURE,
    TEXT,
    VOICE,
    ORPHEUS_VOICES,
    VOICE_PARAMS,
    InvalidRequest,
    Param,
)
from .catalog import EMBEDDED, EMBEDDED_ONLY, VoiceInfo
from .text import Sentence, split_sentences


@dataclass(frozen=True)
class VoiceParams:
    """Piper's three scales, an optional seed for the noise, and the speaker."""

    length_scale: float
    noise_scale: float
    noise_w: float
    seed: int | None = None
    speaker: int = 0  # a multi-speaker voice's speaker id


@dataclass(frozen=True)
class TtsRequest:
    """A validated `tts` request."""

    sentences: tuple[Sentence, ...]  # each spoken as one sentence, in order
    voice_info: VoiceInfo
    speaker: int
    voice: dict[str, np.ndarray]  # the voice parameters present, range-checked, forwarded to acoustic as sent
    chunking: ChunkParams
    chunking_asked: bool  # the client chose INITIAL_CHUNK_FRAMES, so load does not resize it


def _decode(name: str, value: object) -> str:
    try:
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"{name} is not valid UTF-8: {e}") from None


def read_text(inputs: Mapping[str, np.ndarray], max_chars: int) -> str:
    """The request's text: UTF-8, not blank, at most `max_chars` characters."""
    if TEXT not in inputs:
        raise InvalidRequest(f"{TEXT} is required")
    raw = inputs[TEXT].reshape(-1)
    if raw.size != 1:
        raise InvalidRequest(f"{TEXT} must hold exactly one string, got {raw.size}")
    text = _decode(TEXT, raw[0])
    if not text.strip():
        raise InvalidRequest(f"{TEXT} is empty")
    if len(text) > max_chars:
        raise InvalidRequest(f"{TEXT} has {len(text)} characters; the limit is {max_chars}")
    return text


def read_voice(inputs: Mapping[str, np.ndarray], voices: Mapping[str, VoiceInfo]) -> VoiceInfo:
    """The voice VOICE names, the default voice without it; one of `voices`."""
    if VOICE not in inputs:
        return EMBEDDED
    raw = inputs[VOICE].reshape(-1)
    name = _decode(VOICE, raw[0]) if raw.size == 1 else ""
    if name not in voices:
        raise InvalidRequest(f"{VOICE} must name one of this server's voices ({', '.join(voices)}), got {name!r}")
    return voices[name]


def read_sentences(
    inputs: Mapping[str, np.ndarray], max_chars: int, language: str = EMBEDDED.language_family
) -> tuple[Sentence, ...]:
    """The sentences to speak: TEXT cut by split_sentences in `language`, spans in TEXT; or each element
    of SENTENCES as one sentence, never re-split, its span [0, its length). Exactly one
    of the two; each sentence UTF-8, not blank, at most MAX_SENTENCE_CHARS characters,
    and at most `max_chars` characters in all."""
    if (TEXT in inputs) == (SENTENCES in inputs):
        raise InvalidRequest(f"send exactly one of {TEXT} (the whole text) or {SENTENCES} (text cut into sentences)")
    if TEXT in inputs:
        return tuple(split_sentences(read_text(inputs, max_chars), MAX_SENTENCE_CHARS, language))
    raw = inputs[SENTENCES].reshape(-1)
    if raw.size == 0:
        raise InvalidRequest(f"{SENTENCES} is empty")
    sentences = tuple(_decode(f"{SENTENCES}[{i}]", value) for i, value in enumerate(raw))
    for i, sentence in enumerate(sentences):
        if not sentence.strip():
            raise InvalidRequest(f"{SENTENCES}[{i}] is blank")
        if len(sentence) > MAX_SENTENCE_CHARS:
            raise InvalidRequest(
                f"{SENTENCES}[{i}] has {len(sentence)} characters; the limit is {MAX_SENTENCE_CHARS} per sentence"
            )
    total = sum(map(len, sentences))
    if total > max_chars:
        raise InvalidRequest(f"{SENTENCES} have {total} characters in all; the limit is {max_chars}")
    return tuple(Sentence(0, len(s), s) for s in sentences)


def read_params(inputs: Mapping[str, np.ndarray], params: Sequence[Param]) -> dict[str, float | int | None]:
    """Each parameter's value, its default where the input is absent; range-checked."""
    values: dict[str, float | int | None] = {}
    for param in params:
        if param.name not in inputs:
            values[param.name] = param.default
            continue
        array = inputs[param.name].reshape(-1)
        if array.size != 1:
            raise InvalidRequest(f"{param.name} must be a single value, got {array.size}")
        value = array[0].item()
        if not (param.minimum <= value <= param.maximum):  # also refuses NaN
            raise InvalidRequest(f"{param.name}={value} is out of range [{param.minimum}, {param.maximum}]")
        values[param.name] = int(value) if param.is_integer else float(value)
    return values


def read_voice_params(inputs: Mapping[str, np.ndarray], defaults: VoiceParams, voice: VoiceInfo = EMBEDDED) -> VoiceParams:
    """The voice parameters, the voice's `defaults` where absent; the speaker one of `voice`'s."""
    v = read_params(inputs, VOICE_PARAMS)
    return VoiceParams(
        length_scale=defaults.length_scale if v[LENGTH_SCALE] is None else v[LENGTH_SCALE],
        noise_scale=defaults.noise_scale if v[NOISE_SCALE] is None else v[NOISE_SCALE],
        noise_w=defaults.noise_w if v[NOISE_W] is None else v[NOISE_W],
        seed=v[SEED],
        speaker=speaker_of(v[SPEAKER], voice),
    )


def speaker_of(asked: int | None, voice: VoiceInfo) -> int:
    """The speaker id asked for (0 when not), checked against `voice`'s speakers."""
    speaker = asked or 0
    if problem := voice.speaker_problem(speaker):
        raise InvalidRequest(f"{SPEAKER}: {problem}")
    return speaker


def read_chunk_params(inputs: Mapping[str, np.ndarray], params: Sequence[Param] = CHUNK_PARAMS) -> ChunkParams:
    """The chunking inputs, by `params`' defaults and ranges (Piper's, or the AR family's)."""
    v = read_params(inputs, params)
    return ChunkParams(v[INITIAL_CHUNK_FRAMES], v[CHUNK_FRAMES], v[LEFT_CONTEXT_FRAMES], v[RIGHT_CONTEXT_FRAMES])


def read_tts_request(
    inputs: Mapping[str, np.ndarray], max_chars: int, voices: Mapping[str, VoiceInfo] = EMBEDDED_ONLY
) -> TtsRequest:
    """A `tts` request's voice, sentences (read_sentences), voice parameters and
    chunking, all checked."""
    info = read_voice(inputs, voices)
    sentences = read_sentences(inputs, max_chars, info.language_family)
    # Refused here, not by the acoustic stage mid-stream.
    speaker = speaker_of(read_params(inputs, VOICE_PARAMS)[SPEAKER], info)
    voice = {p.name: inputs[p.name] for p in VOICE_PARAMS if p.name in inputs}
    return TtsRequest(sentences, info, speaker, voice, read_chunk_params(inputs), INITIAL_CHUNK_FRAMES in inputs)


@dataclass(frozen=True)
class TalkerRequest:
    """A validated `talker` request: a sentence, its voice and sampling."""

    text: str
    voice: str
    temperature: float
    seed: int | None
    max_frames: int
    stream_id: str | None  # the name a STOP request may stop it by
    guidance_scale: float | None = None  # None: unguided (one vLLM request, not a pair)


@dataclass(frozen=True)
class TtsArRequest:
    """A validated `tts_ar` request."""

    sentences: tuple[Sentence, ...]
    voice: str
    talker: dict[str, np.ndarray]  # the sampling inputs present, forwarded to the Talker as sent
    chunking: ChunkParams


def read_orpheus_voice(inputs: Mapping[str, np.ndarray]) -> str:
    """The Orpheus voice VOICE names (the first of them without it)."""
    if VOICE not in inputs:
        return ORPHEUS_VOICES[0]
    raw = inputs[VOICE].reshape(-1)
    name = _decode(VOICE, raw[0]) if raw.size == 1 else ""
    if name not in ORPHEUS_VOICES:
        raise InvalidRequest(f"{VOICE} must be one of the Orpheus voices ({', '.join(ORPHEUS_VOICES)}), got {name!r}")
    return name


def read_talker_request(inputs: Mapping[str, np.ndarray]) -> TalkerRequest | str:
    """A sentence to speak, or the name of a stream to stop (STOP with its STREAM_ID)."""
    stream = _decode(STREAM_ID, inputs[STREAM_ID].reshape(-1)[0]) if STREAM_ID in inputs else None
    if STOP in inputs and bool(inputs[STOP].reshape(-1)[0]):
        if not stream:
            raise InvalidRequest(f"{STOP} needs the {STREAM_ID} of the stream to stop")
        return stream
    v = read_params(inputs, AR_PARAMS)
    text = read_text(inputs, MAX_SENTENCE_CHARS)
    return TalkerRequest(text, read_orpheus_voice(inputs), v[TEMPERATURE], v[SEED], v[MAX_FRAMES], stream,
                         v[GUIDANCE_SCALE])


def read_tts_ar_request(inputs: Mapping[str, np.ndarray], max_chars: int) -> TtsArRequest:
    """A `tts_ar` request's sentences (read_sentences, English rules), voice, sampling and chunking."""
    voice = read_orpheus_voice(inputs)
    sentences = read_sentences(inputs, max_chars)
    read_params(inputs, AR_PARAMS)  # refused here, not by the Talker mid-stream
    talker = {p.name: inputs[p.name] for p in AR_PARAMS if p.name in inputs}
    return TtsArRequest(sentences, voice, talker, read_chunk_params(inputs, AR_CHUNK_PARAMS))
