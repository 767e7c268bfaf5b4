"""The `thinker` model's requests, read and checked once (no Triton here)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from contract.models import (
    DRAFT,
    MAX_MESSAGES_CHARS,
    MAX_TOKENS,
    MESSAGES,
    PREFIX,
    SEED,
    TEMPERATURE,
    THINKER_PARAMS,
    TOP_K,
    InvalidRequest,
)
from python_backends.inputs import read_params, read_string

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ThinkerRequest:
    messages: list[dict[str, str]]
    draft: tuple[int, ...]
    prefix: tuple[int, ...]
    top_k: int
    max_tokens: int
    temperature: float
    seed: int | None = None  # sampling's, above temperature 0


def read_messages(inputs: Mapping[str, np.ndarray]) -> list[dict[str, str]]:
    """MESSAGES: a JSON list of {role, content}, the last from the user."""
    try:
        messages = json.loads(read_string(inputs, MESSAGES))
    except json.JSONDecodeError as e:
        raise InvalidRequest(f"{MESSAGES} is not JSON: {e}") from None
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(f"{MESSAGES} must be a non-empty list of messages")
    for m in messages:
        if not (isinstance(m, dict) and m.keys() == {"role", "content"} and m["role"] in ROLES
                and isinstance(m["content"], str)):
            raise InvalidRequest(f'each of {MESSAGES} must be {{"role": one of {ROLES}, "content": text}}, not {m!r:.80}')
    if messages[-1]["role"] != "user":
        raise InvalidRequest(f"the last of {MESSAGES} must be the user's")
    if (chars := sum(len(m["content"]) for m in messages)) > MAX_MESSAGES_CHARS:
        raise InvalidRequest(f"{MESSAGES} hold {chars} characters; the limit is {MAX_MESSAGES_CHARS}")
    return messages


def read_tokens(inputs: Mapping[str, np.ndarray], name: str, vocabulary: int) -> tuple[int, ...]:
    """Input `name`'s token ids (none if absent), each in the model's `vocabulary`."""
    tokens = tuple(int(t) for t in inputs.get(name, np.zeros(0, np.int32)).reshape(-1))
    if any(not 0 <= t < vocabulary for t in tokens):
        raise InvalidRequest(f"{name} holds tokens outside the vocabulary [0, {vocabulary})")
    return tokens


def read_thinker_request(inputs: Mapping[str, np.ndarray], vocabulary: int) -> ThinkerRequest:
    """The request: a DRAFT to verify or a PREFIX to go on after, not both (a prefix is
    decided, a draft is not), either leaving room for a token in MAX_TOKENS."""
    messages = read_messages(inputs)
    draft, prefix = read_tokens(inputs, DRAFT, vocabulary), read_tokens(inputs, PREFIX, vocabulary)
    if draft and prefix:
        raise InvalidRequest(f"a request holds a {DRAFT} to verify or a {PREFIX} to go on after, not both")
    v = read_params(inputs, THINKER_PARAMS)
    for name, tokens in ((DRAFT, draft), (PREFIX, prefix)):
        if len(tokens) >= v[MAX_TOKENS]:
            raise InvalidRequest(f"a {name} of {len(tokens)} tokens leaves no room in {MAX_TOKENS}={v[MAX_TOKENS]}")
    return ThinkerRequest(messages, draft, prefix, v[TOP_K], v[MAX_TOKENS], v[TEMPERATURE], v[SEED])
