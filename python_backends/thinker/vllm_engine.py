"""The Thinker on vLLM's async engine (on a GPU; on a CPU, where the model has no GGUF
for llama_engine): a chat model that writes replies, and verifies a draft reply against
a new prompt before going on from what survives (python_backends.thinker.speculation).
No Triton here; python_backends.thinker.thinker_model wraps it.

One reply is at most two vLLM requests. With a draft, the first runs the prompt and the
draft through the model once (prompt logprobs: the best tokens at each draft position)
and writes one token; the second goes on from the kept tokens with the prefix cache.
With a prefix (the reply's start, decided before: a draft written for this very
conversation), one request goes on after it, with the prefix cache and without prompt
logprobs, which vLLM computes without the cache. Leaving a reply's iterator early aborts
the request in flight.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from pathlib import Path

from vllm import SamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM

from python_backends.thinker.replies import Detokenizer, Piece, ThinkerStats, chat_prompt
from python_backends.thinker.speculation import verify
from python_backends.vllm_process import compute_in_engine_core
from python_backends.vllm_stats import StatsLogger


class VllmThinker:
    """A Llama- or Qwen-style chat model directory on vLLM."""

    def __init__(self, model: str | Path, *, dtype: str = "float32", max_model_len: int = 4096, eager: bool = True,
                 on_stats: Callable[[ThinkerStats], None] = lambda stats: None) -> None:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: a small model's many turns
        compute_in_engine_core()
        args = AsyncEngineArgs(model=str(model), dtype=dtype, max_model_len=max_model_len, enforce_eager=eager,
                               enable_prefix_caching=True, disable_log_stats=False)
        self.stats, self._on_stats = ThinkerStats(), on_stats
        logger = functools.partial(StatsLogger, stats=self.stats, on_stats=on_stats)
        self.engine = AsyncLLM.from_engine_args(args, stat_loggers=[logger])
        self.tokenizer = self.engine.get_tokenizer()
        eos = self.tokenizer.eos_token_id
        self.end_tokens = frozenset() if eos is None else frozenset({eos})
        self._ids = itertools.count()

    def prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return chat_prompt(self.tokenizer, messages)

    async def reply(self, messages: list[dict[str, str]], draft: Sequence[int] = (), top_k: int = 1,
                    max_tokens: int = 256, temperature: float = 0.0, prefix: Sequence[int] = (),
                    seed: int | None = None) -> AsyncIterator[Piece]:
        """The reply to `messages`, piece by piece; with a `draft`, its first piece is
        the part of the draft kept and the token after it (Piece.accepted); with a
        `prefix`, the reply goes on after it, and its pieces are what follows it; above
        temperature 0, drawn with `seed` if given (the same seed, the same reply)."""
        prompt, text = self.prompt(messages), Detokenizer(self.tokenizer, prefix)
        written = list(prefix)  # the reply's tokens so far
        if draft:
            accepted, next_token = await self._verify(prompt, list(draft), top_k)
            written = [*draft[:accepted], *([] if next_token is None else [next_token])]
            yield Piece(written, text.push(written), accepted)
        if len(written) >= max_tokens or (written and written[-1] in self.end_tokens):
            if tail := text.push([], last=True):
                yield Piece([], tail)
            return
        sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens - len(written), seed=seed,
                                  output_kind=RequestOutputKind.DELTA)
        name = f"thinker-{next(self._ids)}"
        async with aclosing(self.engine.generate({"prompt_token_ids": prompt + written}, sampling, name)) as outputs:
            async for output in outputs:
                ids = list(output.outputs[0].token_ids)
                yield Piece(ids, text.push(ids, last=output.finished))

    async def warm_up(self) -> None:
        """Run a verification once, as the model loads: vLLM's first request with prompt
        logprobs takes far longer than the next (chat.md has what it measured), and no
        user's first turn should wait for it."""
        prompt = self.prompt([{"role": "user", "content": "Hello."}])
        await self._verify(prompt, prompt[-2:], 1)
        self.stats.drafts_verified = self.stats.draft_tokens = self.stats.accepted_tokens = 0

    async def _verify(self, prompt: list[int], draft: list[int], k: int) -> tuple[int, int | None]:
        """How many of `draft`'s tokens the model keeps after `prompt`, and the token
        that follows them: one forward pass over both."""
        sampling = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=k)
        name = f"thinker-verify-{next(self._ids)}"
        final = None
        async with aclosing(self.engine.generate({"prompt_token_ids": prompt + draft}, sampling, name)) as outputs:
            async for final in outputs:
                pass
        positions = final.prompt_logprobs[len(prompt):]
        best = [[token for token, _ in sorted(ranks.items(), key=lambda item: item[1].rank)][:k] for ranks in positions]
        verdict = verify(draft, best, k, final.outputs[0].token_ids[0], self.end_tokens)
        self.stats.drafts_verified += 1
        self.stats.draft_tokens += len(draft)
        self.stats.accepted_tokens += verdict.accepted
        self._on_stats(self.stats)
        return verdict

    def shutdown(self) -> None:
        self.engine.shutdown()
