"""Chat mode's Thinker requests: a conversation to Triton's `thinker` model, its reply
streamed back piece by piece (through synthesis.responses, on the least loaded Triton)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass

import numpy as np

from contract import models as c
from gateway.backends.requests import BackendFailed, infer_input, on_backend, responses
from gateway.backends.servers import Backends
from speechstream import protocol as v1


@dataclass(frozen=True)
class ReplyPiece:
    ids: list[int]
    text: str
    accepted: int | None  # the first piece of a request that verified a draft: its tokens kept


def thinker_request(messages: Sequence[dict[str, str]], draft: Sequence[int], top_k: int, max_tokens: int,
                    temperature: float, prefix: Sequence[int] = (), seed: int | None = None) -> dict:
    inputs = [
        infer_input(c.MESSAGES, np.array([json.dumps(list(messages)).encode()], dtype=object)),
        infer_input(c.TOP_K, np.array([top_k], np.int32)),
        infer_input(c.MAX_TOKENS, np.array([max_tokens], np.int32)),
        infer_input(c.TEMPERATURE, np.array([temperature], np.float32)),
    ]
    if draft:
        inputs.append(infer_input(c.DRAFT, np.array(draft, np.int32)))
    if prefix:
        inputs.append(infer_input(c.PREFIX, np.array(prefix, np.int32)))
    if seed is not None:
        inputs.append(infer_input(c.SEED, np.array([seed], np.int64)))
    return {"model_name": c.THINKER_MODEL, "inputs": inputs, "parameters": {"triton_enable_empty_final_response": True}}


class ThinkingFailed(BackendFailed):
    """A Thinker request that ended without its reply."""

    code = v1.SYNTHESIS_FAILED  # protocol v1 has no code of its own for the chat model


class Thinker:
    def __init__(self, backends: Backends, progress_s: float) -> None:
        self.backends = backends
        self.progress_s = progress_s

    async def reply(self, messages: Sequence[dict[str, str]], draft: Sequence[int], top_k: int, max_tokens: int,
                    temperature: float, prefix: Sequence[int] = (), seed: int | None = None) -> AsyncIterator[ReplyPiece]:
        """The reply, piece by piece (after `prefix`, if given: the reply's start, decided
        already); ThinkingFailed if it cannot come. Leaving early cancels the request,
        which aborts it in vLLM."""
        request = thinker_request(messages, draft, top_k, max_tokens, temperature, prefix, seed)
        async with on_backend(self.backends, ThinkingFailed) as backend:
            async with aclosing(responses(backend, request, self.progress_s, ThinkingFailed)) as results:
                async for result in results:
                    accepted = result.as_numpy(c.ACCEPTED)
                    yield ReplyPiece(result.as_numpy(c.TOKEN_IDS).tolist(), result.as_numpy(c.TEXT)[0].decode(),
                                     None if accepted is None else int(accepted[0]))
