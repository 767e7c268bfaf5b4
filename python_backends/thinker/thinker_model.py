"""The `thinker` model, Triton-facing: a conversation → its reply, streamed from its engine
on an event loop thread of its own (vllm_serving.VllmModel). The config's `engine`
chooses it: "llama.cpp" (llama_engine.LlamaCppThinker: the model's GGUF, on a CPU) or
"vllm" (vllm_engine.VllmThinker: on a GPU, and wherever the model directory holds no
GGUF). A cancelled request ends its reply before the engine's next step. Imported only
inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path

import numpy as np

from contract import models as c
from contract.voices import CHAT_MODEL_ENV
from python_backends.serving import log_info, request_inputs
from python_backends.thinker.inputs import read_thinker_request
from python_backends.thinker.llama_build import llama_cpp_unusable
from python_backends.vllm_serving import VllmModel, engine_gauges

LLAMA_CPP, VLLM = "llama.cpp", "vllm"


class ThinkerModel(VllmModel):
    model = c.THINKER_MODEL
    gauges = engine_gauges("Thinker", c.THINKER_RUNNING_METRIC, c.THINKER_WAITING_METRIC, c.THINKER_TOKENS_METRIC,
                           c.THINKER_PEAK_METRIC) + (  # then ThinkerStats' own fields, in their order
        (c.THINKER_VERIFIED_METRIC, "Thinker replies that began by verifying a draft"),
        (c.THINKER_DRAFT_TOKENS_METRIC, "tokens of the drafts the Thinker verified"),
        (c.THINKER_ACCEPTED_METRIC, "draft tokens the Thinker kept"),
    )

    async def start_engine(self, parameters: dict[str, str]):
        directory = Path(os.environ[CHAT_MODEL_ENV])
        engine = parameters.get("engine", VLLM)
        if engine not in (LLAMA_CPP, VLLM):
            raise ValueError(f'the thinker\'s engine must be "{LLAMA_CPP}" or "{VLLM}", not {engine!r}')
        if engine == LLAMA_CPP and (why := llama_cpp_unusable(directory)):
            log_info(f"thinker: {why}; serving the chat model on vLLM")
            engine = VLLM
        if engine == LLAMA_CPP:
            from python_backends.thinker.llama_engine import LlamaCppThinker

            thinker = LlamaCppThinker(directory, threads=int(parameters.get("threads", "0")),
                                      slots=int(parameters.get("slots", "4")),
                                      context=int(parameters.get("max_model_len", "4096")), on_stats=self.export)
        else:
            from python_backends.thinker.vllm_engine import VllmThinker

            thinker = VllmThinker(directory, **self.engine_options(parameters), on_stats=self.export)
        log_info(f"thinker: {directory.name} on {engine}")
        await thinker.warm_up()
        return thinker

    async def respond(self, request) -> AsyncIterator[dict[str, np.ndarray]]:
        ask = read_thinker_request(request_inputs(request, self.model), len(self.engine.tokenizer))
        reply = self.engine.reply(ask.messages, ask.draft, ask.top_k, ask.max_tokens, ask.temperature, ask.prefix,
                                  ask.seed)
        async with aclosing(reply) as pieces:
            async for piece in pieces:
                outputs = {c.TOKEN_IDS: np.array(piece.token_ids, dtype=np.int32),
                           c.TEXT: np.array([piece.text.encode()], dtype=object)}
                if piece.accepted is not None:
                    outputs[c.ACCEPTED] = np.array([piece.accepted], dtype=np.int32)
                yield outputs

