"""The `thinker` model, Triton-facing: a conversation → its reply, streamed from a vLLM
engine (engine.ThinkerEngine) on an event loop thread of its own (vllm_serving.VllmModel).
A cancelled request aborts its vLLM request at the next token. Imported only inside
Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import aclosing

import numpy as np

from contract import models as c
from contract.voices import CHAT_MODEL_ENV
from python_backends.serving import request_inputs
from python_backends.thinker.engine import ThinkerEngine
from python_backends.thinker.inputs import read_thinker_request
from python_backends.vllm_serving import VllmModel, engine_gauges


class ThinkerModel(VllmModel):
    model = c.THINKER_MODEL
    gauges = engine_gauges("Thinker", c.THINKER_RUNNING_METRIC, c.THINKER_WAITING_METRIC, c.THINKER_TOKENS_METRIC,
                           c.THINKER_PEAK_METRIC) + (  # then ThinkerStats' own fields, in their order
        (c.THINKER_VERIFIED_METRIC, "Thinker replies that began by verifying a draft"),
        (c.THINKER_DRAFT_TOKENS_METRIC, "tokens of the drafts the Thinker verified"),
        (c.THINKER_ACCEPTED_METRIC, "draft tokens the Thinker kept"),
    )

    async def start_engine(self, parameters: dict[str, str]) -> ThinkerEngine:
        engine = ThinkerEngine(os.environ[CHAT_MODEL_ENV], **self.engine_options(parameters), on_stats=self.export)
        await engine.warm_up()
        return engine

    async def respond(self, request) -> AsyncIterator[dict[str, np.ndarray]]:
        ask = read_thinker_request(request_inputs(request, self.model), len(self.engine.tokenizer))
        reply = self.engine.reply(ask.messages, ask.draft, ask.top_k, ask.max_tokens, ask.temperature, ask.prefix)
        async with aclosing(reply) as pieces:
            async for piece in pieces:
                outputs = {c.TOKEN_IDS: np.array(piece.token_ids, dtype=np.int32),
                           c.TEXT: np.array([piece.text.encode()], dtype=object)}
                if piece.accepted is not None:
                    outputs[c.ACCEPTED] = np.array([piece.accepted], dtype=np.int32)
                yield outputs
