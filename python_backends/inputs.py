"""Reading and validating request inputs both families share, from plain numpy arrays
(no Triton here): text, sentences, scalar parameters, chunking."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from contract.models import (
    CHUNK_FRAMES,
    INITIAL_CHUNK_FRAMES,
    LEFT_CONTEXT_FRAMES,
    MAX_SENTENCE_CHARS,
    RIGHT_CONTEXT_FRAMES,
    SENTENCES,
    TEXT,
    URGENT,
    InvalidRequest,
    Param,
)
from contract.text import DEFAULT_LANGUAGE, Sentence, split_sentences
from python_backends.chunking import ChunkParams


def decode(name: str, value: object) -> str:
    try:
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"{name} is not valid UTF-8: {e}") from None


def read_urgent(inputs: Mapping[str, np.ndarray]) -> bool:
    """Whether the call is URGENT (absent: not)."""
    return URGENT in inputs and bool(inputs[URGENT].reshape(-1)[0])


def read_string(inputs: Mapping[str, np.ndarray], name: str, what: str = "") -> str:
    """Input `name`, required (`what` says what it is), holding exactly one UTF-8 string."""
    if name not in inputs:
        raise InvalidRequest(f"{name} is required{': ' + what if what else ''}")
    raw = inputs[name].reshape(-1)
    if raw.size != 1:
        raise InvalidRequest(f"{name} must hold exactly one string, got {raw.size}")
    return decode(name, raw[0])


def read_text(inputs: Mapping[str, np.ndarray], max_chars: int) -> str:
    """The request's text: UTF-8, not blank, at most `max_chars` characters."""
    text = read_string(inputs, TEXT)
    if not text.strip():
        raise InvalidRequest(f"{TEXT} is empty")
    if len(text) > max_chars:
        raise InvalidRequest(f"{TEXT} has {len(text)} characters; the limit is {max_chars}")
    return text


def read_sentences(
    inputs: Mapping[str, np.ndarray], max_chars: int, language: str = DEFAULT_LANGUAGE
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
    sentences = tuple(decode(f"{SENTENCES}[{i}]", value) for i, value in enumerate(raw))
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


def read_chunk_params(inputs: Mapping[str, np.ndarray], params: Sequence[Param]) -> ChunkParams:
    """The chunking inputs, by `params`' defaults and ranges (each family has its own)."""
    v = read_params(inputs, params)
    return ChunkParams(v[INITIAL_CHUNK_FRAMES], v[CHUNK_FRAMES], v[LEFT_CONTEXT_FRAMES], v[RIGHT_CONTEXT_FRAMES])
