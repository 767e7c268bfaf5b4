"""The Thinker on llama.cpp (its CPU engine): the chat model's GGUF as it ships,
quantized, computed by llama.cpp's CPU kernels for the host it was built on
(scripts/setup.sh builds it there). Replies to several conversations are batched
continuously, as vLLM does: each step decodes one token of every reply being written
and a chunk of each prompt being read, in one llama_decode.

Each reply holds one of `slots` sequences of the context while it is written, and the
sequence keeps its tokens after: the next reply to the same conversation (the next
round of a speculation, the reply after it, the next turn) takes the slot whose tokens
share the longest start with its prompt and reads only the rest. A draft is verified
in the same pass that reads the prompt: the logits at each draft position give the
tokens the model ranks best there (python_backends.thinker.speculation), and the
sequence is cut back to the tokens kept. The chat template and the text are the
tokenizer's of the model directory, so both engines read and write the same tokens.

No Triton here; python_backends.thinker.thinker_model wraps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import queue
import threading
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp.llama_cpp as llama
import numpy as np
from transformers import AutoTokenizer

from contract.models import InvalidRequest
from python_backends.priority import lower_priority
from python_backends.thinker.replies import Detokenizer, Piece, ThinkerStats, chat_prompt
from python_backends.thinker.speculation import verify

log = logging.getLogger(__name__)

BATCH_TOKENS = 256  # the most tokens one step decodes: prompts are read in chunks that leave room for the replies' next tokens


@dataclass(frozen=True)
class Feed:
    """What a reply asks of the next steps: `tokens` appended to its sequence, and the
    logits at the last `want` of them."""

    tokens: list[int]
    want: int = 1


@dataclass(frozen=True)
class Cut:
    """A reply's sequence cut back by its last `tokens` (a draft's tokens not kept)."""

    tokens: int


@dataclass(frozen=True)
class Emit:
    """A reply's next tokens, for its caller; `accepted`: how many of them are the
    draft's, first of a reply that verified one."""

    tokens: list[int]
    accepted: int | None = None


@dataclass(eq=False)
class Slot:
    """One sequence of the context, and the tokens it holds."""

    seq: int
    tokens: list[int] = field(default_factory=list)
    busy: bool = False
    used: int = 0  # when it last took a reply (the count of replies admitted)


@dataclass(eq=False)
class Job:
    """A reply being written: its steps (a generator of what it asks for, each Feed sent
    the logits it asked for), what it still has to feed, and where its tokens go (`emit`,
    called on the compute thread with an Emit, then with None or the reply's failure)."""

    steps: Generator[Feed | Cut | Emit, list[np.ndarray], None]
    emit: Callable[[Emit | BaseException | None], None]
    slot: Slot | None = None
    pending: list[int] = field(default_factory=list)
    want_from: int = 0  # the index in `pending` from which logits are kept
    rows: list[np.ndarray] = field(default_factory=list)
    cancelled: bool = False


class LlamaCppThinker:
    """A Llama-architecture chat model directory holding the GGUF it came from, on llama.cpp."""

    def __init__(self, model: str | Path, *, threads: int = 0, slots: int = 4, context: int = 4096,
                 on_stats: Callable[[ThinkerStats], None] = lambda stats: None) -> None:
        directory = Path(model)
        self.tokenizer = AutoTokenizer.from_pretrained(directory)
        eos = self.tokenizer.eos_token_id
        self.end_tokens = frozenset() if eos is None else frozenset({eos})
        self.context = context
        self.stats, self._on_stats = ThinkerStats(), on_stats
        cores = len(os.sched_getaffinity(0))
        # Prompts are read on every core (a burst, at a turn's end), replies written on one fewer.
        self._model, self._ctx = load(gguf_of(directory), threads or max(1, cores - 1), max(threads, cores), slots,
                                      context)
        self._vocabulary = llama.llama_vocab_n_tokens(llama.llama_model_get_vocab(self._model))
        self._memory = llama.llama_get_memory(self._ctx)
        self._batch = llama.llama_batch_init(BATCH_TOKENS, 0, 1)
        self._slots = [Slot(seq) for seq in range(slots)]
        self._arrivals: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._waiting: list[Job] = []
        self._running: list[Job] = []
        self._admitted = 0
        self._thread = threading.Thread(target=self._run, name="thinker-llama.cpp", daemon=True)
        self._thread.start()

    def prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return chat_prompt(self.tokenizer, messages)

    async def reply(self, messages: list[dict[str, str]], draft: Sequence[int] = (), top_k: int = 1,
                    max_tokens: int = 256, temperature: float = 0.0, prefix: Sequence[int] = (),
                    seed: int | None = None) -> AsyncIterator[Piece]:
        """As VllmThinker.reply: the reply to `messages`, piece by piece; with a `draft`,
        its first piece is the part of the draft kept and the token after it
        (Piece.accepted); with a `prefix`, the reply goes on after it. Leaving the
        iterator early drops the reply before its next step."""
        prompt = self.prompt(messages)
        if len(prompt) + len(draft) + len(prefix) >= self.context:
            raise InvalidRequest(f"the conversation is {len(prompt)} tokens; the Thinker's context holds {self.context}")
        loop, pieces = asyncio.get_running_loop(), asyncio.Queue()
        text = Detokenizer(self.tokenizer, prefix)

        def emit(item: Emit | BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits for the reply any more
                loop.call_soon_threadsafe(pieces.put_nowait, item)

        job = Job(self._steps(prompt, list(draft), top_k, max_tokens, temperature, list(prefix), seed), emit)
        self._arrivals.put(job)
        try:
            while (item := await pieces.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield Piece(item.tokens, text.push(item.tokens), item.accepted)
            if tail := text.push([], last=True):
                yield Piece([], tail)
        finally:
            job.cancelled = True

    async def warm_up(self) -> None:
        """Write a verification and a reply once as the model loads, so that no user's
        first turn pays for llama.cpp's first allocations."""
        prompt = self.prompt([{"role": "user", "content": "Hello."}])
        async for _ in self.reply([{"role": "user", "content": "Hello."}], draft=prompt[-2:], max_tokens=4):
            pass
        self.stats.drafts_verified = self.stats.draft_tokens = self.stats.accepted_tokens = 0

    def shutdown(self) -> None:
        self._arrivals.put(None)
        self._thread.join()
        llama.llama_batch_free(self._batch)
        llama.llama_free(self._ctx)
        llama.llama_model_free(self._model)

    # The steps of one reply, run on the compute thread.

    def _steps(self, prompt: list[int], draft: list[int], k: int, max_tokens: int, temperature: float,
               prefix: list[int], seed: int | None) -> Generator[Feed | Cut | Emit, list[np.ndarray], None]:
        rng = np.random.default_rng(seed)
        written = list(prefix)
        if draft:
            rows = yield Feed(prompt + draft, want=len(draft) + 1)
            best = [top(row, k) for row in rows[:-1]]
            accepted, next_token = verify(draft, best, k, int(np.argmax(rows[-1])), self.end_tokens)
            yield Cut(len(draft) - accepted)
            self._count_verification(len(draft), accepted)
            written = [*draft[:accepted], *([] if next_token is None else [next_token])]
            yield Emit(written, accepted)
            feed = written[accepted:]
        else:
            feed = prompt + prefix
        while not (written and (written[-1] in self.end_tokens or len(written) >= max_tokens
                                or len(prompt) + len(written) >= self.context)):
            rows = yield Feed(feed)
            feed = [pick(rows[0], temperature, rng)]
            written += feed
            self.stats.generated_tokens += 1
            yield Emit(feed)

    def _count_verification(self, drafted: int, accepted: int) -> None:
        self.stats.drafts_verified += 1
        self.stats.draft_tokens += drafted
        self.stats.accepted_tokens += accepted

    # The compute thread: continuous batching over the slots.

    def _run(self) -> None:
        # Below the recognizer and urgent synthesis, with llama.cpp's workers, which this
        # thread starts: a draft written while the user speaks held back the final pass at
        # the turn's end (python_backends/priority.py; docs/benchmarks.md).
        lower_priority()
        while True:
            idle = not self._running and not self._waiting
            try:
                while (job := self._arrivals.get(block=idle)) is not None:
                    self._waiting.append(job)
                    idle = False
                self._stop()
                return
            except queue.Empty:
                pass
            try:
                self._admit()
                self._running = [job for job in self._running if self._go_on(job)]
                if self._running:
                    self._step()
            except Exception as e:  # noqa: BLE001 - the replies in the step fail; the engine goes on
                log.exception("the Thinker's step failed")
                for job in self._running:
                    self._cut(job.slot, 0)  # what the step left in the sequence is unknown
                    self._end(job, e)
                self._running = []
            self._report()

    def _stop(self) -> None:
        stopping = RuntimeError("the Thinker is stopping")
        for job in self._running + self._waiting:
            self._end(job, stopping)

    def _admit(self) -> None:
        """Give waiting replies free slots: each the slot sharing the longest start with it."""
        self._waiting = [job for job in self._waiting if not (job.cancelled and self._end(job, None))]
        while self._waiting and (free := [slot for slot in self._slots if not slot.busy]):
            job = self._waiting.pop(0)
            first = next(job.steps)
            slot = max(free, key=lambda s: (shared(s.tokens, first.tokens), -s.used))  # else the least recently used
            keep = min(shared(slot.tokens, first.tokens), len(first.tokens) - first.want)
            self._cut(slot, keep)
            self._admitted += 1
            slot.busy, slot.used, job.slot = True, self._admitted, slot
            self._give(job, Feed(first.tokens[keep:], first.want))
            self._running.append(job)

    def _go_on(self, job: Job) -> bool:
        """Whether `job` is still to be stepped: one whose feed has been read is sent its
        logits and goes on to its next feed, or ends."""
        if job.cancelled:
            return self._end(job, None)
        try:
            while not job.pending:
                asked = job.steps.send(job.rows)
                job.rows = []
                if isinstance(asked, Cut):
                    self._cut(job.slot, len(job.slot.tokens) - asked.tokens)
                elif isinstance(asked, Emit):
                    job.emit(asked)
                else:
                    self._give(job, asked)
        except StopIteration:
            return self._end(job, None)
        except Exception as e:  # noqa: BLE001 - the reply's own failure goes to its caller
            return self._end(job, e)
        return True

    def _give(self, job: Job, feed: Feed) -> None:
        job.pending, job.want_from, job.rows = list(feed.tokens), len(feed.tokens) - feed.want, []

    def _end(self, job: Job, error: BaseException | None) -> bool:
        job.steps.close()
        job.emit(error)
        if job.slot is not None:
            job.slot.busy = False
            job.slot = None
        return False

    def _cut(self, slot: Slot, keep: int) -> None:
        llama.llama_memory_seq_rm(self._memory, slot.seq, keep, -1)
        del slot.tokens[keep:]

    def _step(self) -> None:
        """One llama_decode: every writing reply's next token, then chunks of the prompts."""
        batch, taken = self._batch, []  # (job, tokens taken, logits kept from this batch index on)
        n = 0
        for job in sorted(self._running, key=lambda j: len(j.pending)):
            count = min(len(job.pending), BATCH_TOKENS - n)
            if count == 0:
                break
            start = len(job.slot.tokens)
            for i, token in enumerate(job.pending[:count]):
                batch.token[n + i] = token
                batch.pos[n + i] = start + i
                batch.n_seq_id[n + i] = 1
                batch.seq_id[n + i][0] = job.slot.seq
                batch.logits[n + i] = int(i >= job.want_from)
            taken.append((job, count, n))
            n += count
        batch.n_tokens = n
        if (status := llama.llama_decode(self._ctx, batch)) != 0:
            raise RuntimeError(f"llama_decode failed ({status}) on {n} tokens of {len(taken)} replies")
        for job, count, at in taken:
            for i in range(max(0, job.want_from), count):
                job.rows.append(np.ctypeslib.as_array(llama.llama_get_logits_ith(self._ctx, at + i),
                                                      shape=(self._vocabulary,)).copy())
            job.slot.tokens += job.pending[:count]
            job.want_from -= count
            del job.pending[:count]

    def _report(self) -> None:
        self.stats.running, self.stats.waiting = len(self._running), len(self._waiting)
        self.stats.peak_running = max(self.stats.peak_running, self.stats.running)
        self._on_stats(self.stats)


def shared(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens `a` and `b` share from their start."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def top(logits: np.ndarray, k: int) -> list[int]:
    """The `k` tokens with the highest logits, best first."""
    best = np.argpartition(-logits, k - 1)[:k] if k < len(logits) else np.arange(len(logits))
    return [int(t) for t in best[np.argsort(-logits[best], kind="stable")]]


def pick(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """The next token: the best (temperature 0), or drawn from the softmax at `temperature`."""
    if temperature == 0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / temperature
    p = np.exp(scaled - scaled.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def gguf_of(directory: Path) -> Path:
    """The GGUF a model directory was converted from (gguf_model writes it there)."""
    found = sorted(directory.glob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"{directory} holds no GGUF for llama.cpp")
    return found[0]


_log_callback = llama.llama_log_callback(lambda level, text, data: None)  # kept: llama.cpp calls it


def load(gguf: Path, threads: int, batch_threads: int, slots: int, context: int):
    """The model and a context with `slots` sequences of `context` tokens each, writing
    on `threads` and reading prompts on `batch_threads`."""
    llama.llama_log_set(_log_callback, ctypes.c_void_p())  # llama.cpp's load chatter; a failure raises below
    llama.llama_backend_init()
    params = llama.llama_model_default_params()
    # No extra buffer types: on AMX hosts llama.cpp's AMX kernels crash inside llama_decode
    # on inputs of two tokens or more (ggml-org/llama.cpp#20824); the plain CPU kernels are used.
    params.use_extra_bufts = False
    model = llama.llama_model_load_from_file(str(gguf).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {gguf}")
    options = llama.llama_context_default_params()
    options.n_ctx, options.n_seq_max, options.kv_unified = context * slots, slots, False
    options.n_batch = options.n_ubatch = BATCH_TOKENS
    options.n_threads, options.n_threads_batch = threads, batch_threads
    ctx = llama.llama_init_from_model(model, options)
    if not ctx:
        llama.llama_model_free(model)
        raise RuntimeError(f"llama.cpp could not make a context of {slots} × {context} tokens")
    return model, ctx
