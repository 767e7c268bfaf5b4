"""The Talker: a vLLM async engine over an Orpheus-format model directory, streaming
frames of codec codes per request (no Triton here; model_repository/talker wraps it).

Many requests share the engine's continuous batching. Every request carries its codec
layout in `SamplingParams.extra_args`, and `CodecLogitsProcessor` lets through, at each
step, only the tokens the layout allows there (python_backends.ar.layouts.allowed), so
even an untrained model writes well-formed frames. Leaving a request's iterator early
(a cancelled stream) aborts it in the engine at once.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from vllm import SamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.metrics.loggers import StatLoggerBase
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from .layouts import Allowed, CodecTokens, FrameAssembler, Layout, allowed
from .orpheus import OrpheusTokens

CODEC_ARG = "speechstream_codec"  # the SamplingParams.extra_args key of a request's layout


@dataclass(frozen=True)
class TalkerParams:
    """One request's sampling (the contract's AR_PARAMS): greedy at temperature 0,
    repeatable with a seed; top_p and the repetition penalty are Orpheus's own."""

    temperature: float
    max_frames: int
    seed: int | None = None
    top_p: float = 0.95
    repetition_penalty: float = 1.1


class CodecLogitsProcessor(LogitsProcessor):
    """Masks each codec request's logits to the tokens its layout allows next."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        self._rows: dict[int, tuple[CodecTokens, list[int]]] = {}
        self._kept: dict[tuple[CodecTokens, Allowed], torch.Tensor] = {}  # a few per layout: one per position

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self._rows, batch_update, _codec_of)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for row, (fmt, written) in self._rows.items():
            may = allowed(fmt, len(written), _pad_step(fmt, written))
            if (keep := self._kept.get((fmt, may))) is None:
                keep = self._kept[fmt, may] = torch.from_numpy(may.tokens(fmt)).to(logits.device)
            kept = logits[row, keep]
            logits[row] = float("-inf")
            logits[row, keep] = kept
        return logits


def _codec_of(params: SamplingParams, _prompt: list[int] | None, written: list[int]):
    codec = (params.extra_args or {}).get(CODEC_ARG)
    if codec is None:
        return None
    return CodecTokens(**codec | {"layout": Layout(codec["layout"])}), written


def _pad_step(fmt: CodecTokens, written: list[int]) -> int | None:
    """The delay pattern's step whose position 0 was the first pad after speech."""
    if fmt.layout is not Layout.DELAY:
        return None
    k = fmt.positions
    return next((i // k for i in range(k, len(written), k) if written[i] == fmt.pad_token), None)


@dataclass
class TalkerStats:
    """vLLM's own counts, as its scheduler last reported them."""

    running: int = 0  # requests in the batch
    waiting: int = 0  # requests waiting for a place in it
    generated_tokens: int = 0  # tokens written since the engine started
    peak_running: int = 0  # the most requests in one batch since the engine started


class _StatsLogger(StatLoggerBase):
    """Keeps TalkerStats from vLLM's reports and hands them on (to Triton's metrics)."""

    def __init__(self, vllm_config, engine_index: int = 0, *, stats: TalkerStats,
                 on_stats: Callable[[TalkerStats], None]) -> None:
        self.stats, self.on_stats = stats, on_stats

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
        if scheduler_stats is not None:
            self.stats.running, self.stats.waiting = scheduler_stats.num_running_reqs, scheduler_stats.num_waiting_reqs
            self.stats.peak_running = max(self.stats.peak_running, self.stats.running)
        if iteration_stats is not None:
            self.stats.generated_tokens += iteration_stats.num_generation_tokens
        self.on_stats(self.stats)

    def log_engine_initialized(self) -> None:
        pass


class TalkerEngine:
    """An Orpheus-format Talker on vLLM: text in, frames of 7 SNAC codes out."""

    def __init__(self, model: str | Path, *, dtype: str = "float32", max_model_len: int = 4096, eager: bool = True,
                 on_stats: Callable[[TalkerStats], None] = lambda stats: None) -> None:
        # vLLM sizes its CPU KV cache from this (GiB); 1 holds 8 streams of a small model.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        args = AsyncEngineArgs(
            model=str(model), dtype=dtype, max_model_len=max_model_len, enforce_eager=eager,
            logits_processors=[CodecLogitsProcessor], disable_log_stats=False,
        )
        self.stats = TalkerStats()
        logger = functools.partial(_StatsLogger, stats=self.stats, on_stats=on_stats)
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
        fmt = self.tokens.codec
        sampling = SamplingParams(
            temperature=params.temperature, top_p=params.top_p, repetition_penalty=params.repetition_penalty,
            seed=params.seed, max_tokens=params.max_frames * fmt.positions + 1, stop_token_ids=[fmt.end_token],
            output_kind=RequestOutputKind.DELTA, extra_args={CODEC_ARG: asdict(fmt) | {"layout": fmt.layout.value}},
        )
        assembler = FrameAssembler(fmt)
        request = {"prompt_token_ids": self.prompt(text, voice)}
        async for output in self.engine.generate(request, sampling, f"talker-{next(self._ids)}"):
            for token in output.outputs[0].token_ids:
                if token == fmt.end_token:
                    return
                if len(frames := assembler.push(token)):
                    yield frames

    def shutdown(self) -> None:
        self.engine.shutdown()
