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
    TEMPERATURE,
    THINKER_PARAMS,
    TOP_K,
    InvalidRequest,
)
from python_backends.inputs import decode, read_params

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ThinkerRequest:
    messages: list[dict[str, str]]
    draft: tuple[int, ...]
    top_k: int
    max_tokens: int
    temperature: float


def read_messages(inputs: Mapping[str, np.ndarray]) -> list[dict[str, str]]:
    """MESSAGES: a JSON list of {role, content}, the last from the user."""
    raw = inputs[MESSAGES].reshape(-1)
    if raw.size != 1:
        raise InvalidRequest(f"{MESSAGES} must hold exactly one string, got {raw.size}")
    try:
        messages = json.loads(decode(MESSAGES, raw[0]))
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


def read_thinker_request(inputs: Mapping[str, np.ndarray], vocabulary: int) -> ThinkerRequest:
    """The request; a DRAFT's tokens must be in the model's `vocabulary`."""
    messages = read_messages(inputs)
    draft = tuple(int(t) for t in inputs.get(DRAFT, np.zeros(0, np.int32)).reshape(-1))
    if any(not 0 <= t < vocabulary for t in draft):
        raise InvalidRequest(f"{DRAFT} holds tokens outside the vocabulary [0, {vocabulary})")
    v = read_params(inputs, THINKER_PARAMS)
    if len(draft) >= v[MAX_TOKENS]:
        raise InvalidRequest(f"a {DRAFT} of {len(draft)} tokens leaves no room in {MAX_TOKENS}={v[MAX_TOKENS]}")
    return ThinkerRequest(messages, draft, v[TOP_K], v[MAX_TOKENS], v[TEMPERATURE])
