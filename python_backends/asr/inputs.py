"""The `asr` model's requests, read and checked once (no Triton here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from contract.models import (
    ASR_MAX_AUDIO_MS,
    ASR_PARAMS,
    ASR_SAMPLE_RATE,
    AUDIO,
    END,
    ENDPOINT_MS,
    PARTIALS,
    SMART_TURN,
    STOP,
    STREAM_ID,
    InvalidRequest,
)
from python_backends.inputs import read_params, read_string

MAX_STREAM_ID_CHARS = 256
MAX_AUDIO_SAMPLES = ASR_MAX_AUDIO_MS * ASR_SAMPLE_RATE // 1000


@dataclass(frozen=True)
class AsrRequest:
    stream_id: str
    audio: np.ndarray  # float32 in [-1, 1], mono at ASR_SAMPLE_RATE
    end: bool  # the utterance in progress ends after this audio
    stop: bool  # and the recognizer stream with it
    partials: bool
    endpoint_ms: int
    smart_turn: bool = False  # the turn detector may end an utterance before its endpoint


def read_stream_id(inputs: Mapping[str, np.ndarray]) -> str:
    name = read_string(inputs, STREAM_ID, "the recognizer stream's name")
    if not name or len(name) > MAX_STREAM_ID_CHARS:
        raise InvalidRequest(f"{STREAM_ID} must have 1 to {MAX_STREAM_ID_CHARS} characters, not {len(name)}")
    return name


def read_audio(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """AUDIO (none: no audio), as float32 in [-1, 1]."""
    raw = inputs.get(AUDIO, np.zeros(0, np.int16))
    if raw.dtype != np.int16 or raw.ndim != 1:
        raise InvalidRequest(f"{AUDIO} must be INT16 [samples], mono PCM at {ASR_SAMPLE_RATE} Hz; "
                             f"got {raw.dtype} {list(raw.shape)}")
    if raw.size > MAX_AUDIO_SAMPLES:
        raise InvalidRequest(f"{AUDIO} holds {raw.size} samples; the limit is {MAX_AUDIO_SAMPLES} "
                             f"({ASR_MAX_AUDIO_MS} ms) a request")
    return raw.astype(np.float32) / 32768.0


def read_flag(inputs: Mapping[str, np.ndarray], name: str, default: bool) -> bool:
    if name not in inputs:
        return default
    raw = inputs[name].reshape(-1)
    if raw.size != 1:
        raise InvalidRequest(f"{name} must be a single BOOL, got {raw.size} values")
    return bool(raw[0])


def read_asr_request(inputs: Mapping[str, np.ndarray]) -> AsrRequest:
    """The request, every input checked before any of it is heard: a bad request changes
    nothing of its recognizer stream."""
    stream_id, audio = read_stream_id(inputs), read_audio(inputs)
    stop = read_flag(inputs, STOP, False)
    return AsrRequest(stream_id, audio, read_flag(inputs, END, False) or stop, stop, read_flag(inputs, PARTIALS, True),
                      read_params(inputs, ASR_PARAMS)[ENDPOINT_MS], read_flag(inputs, SMART_TURN, False))
