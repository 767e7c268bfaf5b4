"""The Talker: a vLLM async engine over an Orpheus-format model directory, streaming
frames of codec codes per request (no Triton here; model_repository/talker wraps it).

Many requests share the engine's continuous batching. Every request carries its codec
layout in `SamplingParams.extra_args`, and `CodecLogitsProcessor` lets through, at each
step, only the tokens the layout allows there (python_backends.ar.layouts.allowed), so
even an untrained model writes well-formed frames. Leaving a request's iterator early
(a cancelled stream) aborts it in the engine at once.

A stream with a guidance scale is two requests, with and without its text, that
`PairingScheduler` admits in the same step and `CodecLogitsProcessor` guides in
lock-step (python_backends.ar.guidance); the Talker checks that their token streams
stayed one, and counts and logs a pair that did not.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import random
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from vllm import SamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.sampling_params import RequestOutputKind
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from python_backends.ar import step_logits
from python_backends.ar.guidance import PairGate, Role, Row, diverged_at, plan
from python_backends.ar.inputs import TalkerParams
from python_backends.ar.layouts import ENDING, Allowed, CodecTokens, FrameAssembler, Layout, allowed
from python_backends.ar.orpheus import OrpheusTokens
from python_backends.ar.step_logits import StepPlan
from python_backends.engine_stats import EngineStats
from python_backends.vllm_process import compute_in_engine_core
from python_backends.vllm_stats import StatsLogger

CODEC_ARG = "speechstream_codec"  # the SamplingParams.extra_args key of a request's layout
GUIDANCE_ARG = "speechstream_guidance"  # and of its place in a guided pair: {"pair", "role", "scale"}
GUIDED_LAG_S = 1.0  # how long a finished stream waits for its unconditional row's last output
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Guided:
    """A request's place in a guided pair (its GUIDANCE_ARG)."""

    pair: str
    role: Role
    scale: float


@dataclass(frozen=True)
class _CodecRow:
    fmt: CodecTokens
    written: list[int]  # vLLM's own list of the request's output tokens, which it extends
    guided: _Guided | None


class CodecLogitsProcessor(LogitsProcessor):
    """Guides the rows of guided pairs that are in lock-step, ends the unconditional row
    of a pair that is not, and masks each codec request's row to the tokens its layout
    allows next. Guidance comes first: masked logits (−inf) cannot be combined. The
    step's work is a StepPlan, done in one fused kernel on a GPU (python_backends.ar.step_logits)."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        self._rows: dict[int, _CodecRow] = {}

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self._rows, batch_update, _codec_of)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        guidance = plan(Row(i, r.guided.pair, r.guided.role, len(r.written), r.guided.scale)
                        for i, r in self._rows.items() if r.guided is not None)
        masks = {row: (ENDING if row in guidance.to_end else _allowed(r)).bounds(r.fmt) for row, r in self._rows.items()}
        return step_logits.apply(logits, StepPlan(guidance.pairs, masks))


def _allowed(r: _CodecRow) -> Allowed:
    return allowed(r.fmt, len(r.written), _pad_step(r.fmt, r.written))


def _guided_of(params: SamplingParams) -> _Guided | None:
    guided = (params.extra_args or {}).get(GUIDANCE_ARG)
    return None if guided is None else _Guided(guided["pair"], Role(guided["role"]), float(guided["scale"]))


def _codec_of(params: SamplingParams, _prompt: list[int] | None, written: list[int]) -> _CodecRow | None:
    codec = (params.extra_args or {}).get(CODEC_ARG)
    if codec is None:
        return None
    return _CodecRow(CodecTokens(**codec | {"layout": Layout(codec["layout"])}), written, _guided_of(params))


class PairingScheduler(Scheduler):
    """vLLM's scheduler, but the two requests of a guided pair enter its waiting queue
    together and only when the batch has room for both, so they are admitted in the same
    step (vLLM receives them one at a time, and may run a step in between)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pairs: PairGate = PairGate()

    def _enqueue_waiting_request(self, request) -> None:
        guided = _guided_of(request.sampling_params) if request.sampling_params else None
        if guided is None:
            super()._enqueue_waiting_request(request)
            return
        self._pairs.arrive(guided.pair, request)
        self._release_pairs()

    def _release_pairs(self) -> None:
        room = self.max_num_active_reqs - len(self.running) - len(self.waiting)
        for request in self._pairs.release(room):
            super()._enqueue_waiting_request(request)

    def schedule(self, *args, **kwargs):
        self._release_pairs()
        return super().schedule(*args, **kwargs)

    def finish_requests(self, request_ids, finished_status):
        if request_ids is not None:
            request_ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
        ids = self.requests.keys() if request_ids is None else request_ids
        self._pairs.forget([self.requests[i] for i in ids if i in self.requests])
        return super().finish_requests(request_ids, finished_status)


def _pad_step(fmt: CodecTokens, written: list[int]) -> int | None:
    """The delay pattern's step whose position 0 was the first pad after speech."""
    if fmt.layout is not Layout.DELAY:
        return None
    k = fmt.positions
    return next((i // k for i in range(k, len(written), k) if written[i] == fmt.pad_token), None)


@dataclass
class TalkerStats(EngineStats):
    guided: int = 0  # streams decoded as a guided pair (counted by the Talker, not vLLM)
    guidance_lost: int = 0  # of those, pairs that fell out of lock-step before the end


class TalkerEngine:
    """An Orpheus-format Talker on vLLM: text in, frames of 7 SNAC codes out."""

    def __init__(self, model: str | Path, *, dtype: str = "float32", max_model_len: int = 4096, eager: bool = True,
                 on_stats: Callable[[TalkerStats], None] = lambda stats: None) -> None:
        # vLLM sizes its CPU KV cache from this (GiB); 1 holds 8 streams of a small model.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        # GPU builds default to a model runner that refuses custom logits processors.
        os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
        compute_in_engine_core()
        args = AsyncEngineArgs(
            model=str(model), dtype=dtype, max_model_len=max_model_len, enforce_eager=eager,
            logits_processors=[CodecLogitsProcessor], scheduler_cls=PairingScheduler, disable_log_stats=False,
        )
        self.stats, self._on_stats = TalkerStats(), on_stats
        logger = functools.partial(StatsLogger, stats=self.stats, on_stats=on_stats)
        self.engine = AsyncLLM.from_engine_args(args, stat_loggers=[logger])
        tokenizer = self.engine.get_tokenizer()
        self.tokens = OrpheusTokens(tokenizer.convert_tokens_to_ids("<custom_token_0>"),
                                    tokenizer.convert_tokens_to_ids("<|eot_id|>"))
        self._tokenizer = tokenizer
        self._ids = itertools.count()

    def prompt(self, text: str, voice: str) -> list[int]:
        """Orpheus's prompt for `text` in `voice` ("tara: Hello there.")."""
        return self.tokens.prompt(self._tokenizer.encode(f"{voice}: {text}"))

    async def frames(self, text: str, voice: str, params: TalkerParams) -> AsyncIterator[np.ndarray]:
        """The frames of `text`, [n, 7] codes at a time, as the engine writes them."""
        name = f"talker-{next(self._ids)}"
        if params.guidance_scale is None:
            tokens = self._tokens(self.prompt(text, voice), self._sampling(params), name)
        else:
            tokens = self._guided_tokens(text, voice, params, name)
        assembler = FrameAssembler(self.tokens.codec)
        async with aclosing(tokens):
            async for token in tokens:
                if token != self.tokens.codec.end_token and len(frames := assembler.push(token)):
                    yield frames

    def _sampling(self, params: TalkerParams, guided: _Guided | None = None) -> SamplingParams:
        fmt = self.tokens.codec
        extra = {CODEC_ARG: asdict(fmt) | {"layout": fmt.layout.value}}
        if guided is not None:
            extra[GUIDANCE_ARG] = {"pair": guided.pair, "role": guided.role.value, "scale": guided.scale}
        return SamplingParams(
            temperature=params.temperature, top_p=params.top_p, repetition_penalty=params.repetition_penalty,
            seed=params.seed, max_tokens=params.max_frames * fmt.positions + 1, stop_token_ids=[fmt.end_token],
            output_kind=RequestOutputKind.DELTA, extra_args=extra,
        )

    async def _tokens(self, prompt: list[int], sampling: SamplingParams, request_id: str) -> AsyncIterator[int]:
        """One request's tokens, its end token included; leaving early aborts it."""
        async with aclosing(self.engine.generate({"prompt_token_ids": prompt}, sampling, request_id)) as outputs:
            async for output in outputs:
                for token in output.outputs[0].token_ids:
                    yield token

    async def _guided_tokens(self, text: str, voice: str, params: TalkerParams, name: str) -> AsyncIterator[int]:
        """The conditional request's tokens, its unconditional partner (the voice without
        the text) run beside it; at the end, the check that both wrote the same tokens."""
        # Both rows must draw the same random numbers to sample the same token.
        params = replace(params, seed=random.randrange(2**31) if params.seed is None else params.seed)
        sampling = {role: self._sampling(params, _Guided(name, role, params.guidance_scale)) for role in Role}
        self.stats.guided += 1
        unconditional = asyncio.create_task(_collect(
            self._tokens(self.prompt("", voice), sampling[Role.UNCONDITIONAL], f"{name}-unconditional")))
        written: list[int] = []
        try:
            async with aclosing(self._tokens(self.prompt(text, voice), sampling[Role.CONDITIONAL], name)) as tokens:
                async for token in tokens:
                    written.append(token)
                    yield token
            done, _ = await asyncio.wait([unconditional], timeout=GUIDED_LAG_S)
            self._check_lock_step(name, written, unconditional.result() if done else [])
        finally:
            unconditional.cancel()  # aborts it in the engine if it still runs

    def _check_lock_step(self, name: str, conditional: list[int], unconditional: list[int]) -> None:
        if (at := diverged_at(conditional, unconditional)) is not None:
            self.stats.guidance_lost += 1
            log.warning("talker: guided stream %s fell out of lock-step at token %d of %d (a row preempted or "
                        "admitted late); decoded unguided from there", name, at, len(conditional))
        self._on_stats(self.stats)

    def shutdown(self) -> None:
        self.engine.shutdown()


async def _collect(tokens: AsyncIterator[int]) -> list[int]:
    return [token async for token in tokens]
