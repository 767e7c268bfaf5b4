"""Reading and validating request inputs, from plain numpy arrays (no Triton here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .contract import (
    CHUNK_FRAMES,
    CHUNK_PARAMS,
    INITIAL_CHUNK_FRAMES,
    LEFT_CONTEXT_FRAMES,
    LENGTH_SCALE,
    NOISE_SCALE,
    NOISE_W,
    RIGHT_CONTEXT_FRAMES,
    SEED,
    TEXT,
    VOICE_PARAMS,
    InvalidRequest,
    Param,
)
from .engines import VoiceParams


@dataclass(frozen=True)
class ChunkParams:
    initial_frames: int
    frames: int
    left_context: int
    right_context: int


def read_text(inputs: Mapping[str, np.ndarray], max_chars: int) -> str:
    """The request's text: UTF-8, not blank, at most `max_chars` characters."""
    if TEXT not in inputs:
        raise InvalidRequest(f"{TEXT} is required")
    raw = inputs[TEXT].reshape(-1)
    if raw.size != 1:
        raise InvalidRequest(f"{TEXT} must hold exactly one string, got {raw.size}")
    value = raw[0]
    try:
        text = value.decode("utf-8") if isinstance(value, bytes) else str(value)
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"{TEXT} is not valid UTF-8: {e}") from None
    if not text.strip():
        raise InvalidRequest(f"{TEXT} is empty")
    if len(text) > max_chars:
        raise InvalidRequest(f"{TEXT} has {len(text)} characters; the limit is {max_chars}")
    return text


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


def read_voice_params(inputs: Mapping[str, np.ndarray], defaults: VoiceParams) -> VoiceParams:
    v = read_params(inputs, VOICE_PARAMS)
    return VoiceParams(
        length_scale=defaults.length_scale if v[LENGTH_SCALE] is None else v[LENGTH_SCALE],
        noise_scale=defaults.noise_scale if v[NOISE_SCALE] is None else v[NOISE_SCALE],
        noise_w=defaults.noise_w if v[NOISE_W] is None else v[NOISE_W],
        seed=v[SEED],
    )


def read_chunk_params(inputs: Mapping[str, np.ndarray]) -> ChunkParams:
    v = read_params(inputs, CHUNK_PARAMS)
    return ChunkParams(v[INITIAL_CHUNK_FRAMES], v[CHUNK_FRAMES], v[LEFT_CONTEXT_FRAMES], v[RIGHT_CONTEXT_FRAMES])
