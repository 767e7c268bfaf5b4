"""The `asr` model's recognizer streams, served on an event loop (no Triton here): each
STREAM_ID's `Utterances`, its requests heard one at a time in the order they came, on a
pool of worker threads shared by all recognizer streams (the VAD and Whisper release the
GIL, so they are heard in parallel); recognizer streams that STOP, whose request is
cancelled, or that go quiet for `idle_s` are dropped; the counts the model exports."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from contract.models import ASR_SAMPLE_RATE, InvalidRequest
from python_backends.asr.inputs import AsrRequest
from python_backends.asr.utterances import Event, Policy, Transcriber, TurnDetector, Utterances, Vad

log = logging.getLogger("speechstream.asr")

SWEEP_EVERY_S = 5.0
EXPORT_EVERY_S = 1.0


@dataclass
class AsrStats:
    """The counts on Triton's metrics port, in AsrModel.gauges' order."""

    streams: int = 0  # recognizer streams open now (ASR_STREAMS_METRIC)
    passes: int = 0  # transcriber passes since the start
    pass_seconds: float = 0.0  # their time
    audio_seconds: float = 0.0  # audio heard since the start


class TimedTranscriber:
    """A transcriber whose passes are counted in `stats` (from any worker thread)."""

    def __init__(self, transcriber: Transcriber, stats: AsrStats) -> None:
        self.transcriber, self.stats = transcriber, stats
        self.lock = threading.Lock()

    def transcribe(self, audio: np.ndarray) -> str:
        started = time.perf_counter()
        try:
            return self.transcriber.transcribe(audio)
        finally:
            with self.lock:
                self.stats.passes += 1
                self.stats.pass_seconds += time.perf_counter() - started


@dataclass
class RecognizerStream:
    """One recognizer stream: its utterances, and the order its requests are heard in."""

    utterances: Utterances
    heard_at: float = field(default_factory=time.monotonic)  # when its latest request came
    order: asyncio.Lock = field(default_factory=asyncio.Lock)  # FIFO: its requests are heard as they came
    waiting: int = 0  # its requests waiting to be heard


class Listening:
    """Every recognizer stream of a model instance. `hear` is called on one event loop, in
    the order requests arrive."""

    def __init__(self, new_vad: Callable[[], Vad], transcriber: Transcriber, threads: int, max_streams: int,
                 idle_s: float, policy: Policy = Policy(), turns: TurnDetector | None = None,
                 on_stats: Callable[[AsrStats], None] = lambda stats: None,
                 warn: Callable[[str], None] = log.warning) -> None:
        self.stats, self.on_stats, self.warn = AsrStats(), on_stats, warn
        self.exported_at = 0.0  # time.monotonic() of the last export
        self.new_vad, self.transcriber = new_vad, TimedTranscriber(transcriber, self.stats)
        self.policy, self.max_streams, self.idle_s, self.turns = policy, max_streams, idle_s, turns
        self.workers = ThreadPoolExecutor(threads, thread_name_prefix="asr")
        self.recognizer_streams: dict[str, RecognizerStream] = {}
        self.sweeper: asyncio.Task | None = None

    async def hear(self, request: AsrRequest, cancelled: Callable[[], bool] = lambda: False) -> list[Event]:
        """The events of `request`'s audio, END and STOP. Its recognizer stream's earlier
        requests are heard first: its place in their order is taken before this coroutine
        first awaits. A recognizer stream behind (its next request already waiting: a pass
        took longer than the audio it waited for, or a file comes faster than real time)
        runs no partial pass until it has caught up, so that passes never leave it more
        than one pass behind."""
        recognizer_stream = self._recognizer_stream(request.stream_id)
        recognizer_stream.waiting += 1
        async with recognizer_stream.order:
            recognizer_stream.waiting -= 1
            if cancelled():  # its gateway went away: nobody hears this recognizer stream any more
                self._drop(request.stream_id, recognizer_stream, "its request was cancelled")
                return []
            partials = request.partials and not recognizer_stream.waiting
            events = await asyncio.get_running_loop().run_in_executor(
                self.workers, recognizer_stream.utterances.hear, request.audio, request.endpoint_ms, partials,
                request.end, request.smart_turn)
        self.stats.audio_seconds += len(request.audio) / ASR_SAMPLE_RATE
        if request.stop:
            self._drop(request.stream_id, recognizer_stream)
        if time.monotonic() - self.exported_at >= EXPORT_EVERY_S:
            self._export()
        return events

    def _recognizer_stream(self, stream_id: str) -> RecognizerStream:
        if (recognizer_stream := self.recognizer_streams.get(stream_id)) is None:
            if len(self.recognizer_streams) >= self.max_streams:
                raise InvalidRequest(f"{len(self.recognizer_streams)} recognizer streams are open; "
                                     f"the limit is {self.max_streams}")
            recognizer_stream = RecognizerStream(Utterances(self.new_vad(), self.transcriber, self.policy, self.turns))
            self.recognizer_streams[stream_id] = recognizer_stream
            self._export()
        recognizer_stream.heard_at = time.monotonic()
        return recognizer_stream

    def _drop(self, stream_id: str, recognizer_stream: RecognizerStream, why: str = "") -> None:
        if self.recognizer_streams.get(stream_id) is not recognizer_stream:  # dropped already (a STOP's requests cancelled with it)
            return
        del self.recognizer_streams[stream_id]
        self._export()
        if why:
            self.warn(f"recognizer stream {stream_id!r} dropped: {why}")

    def _export(self) -> None:
        """The counts to the metrics port: at once when recognizer streams open or go, else
        at most every EXPORT_EVERY_S (each gauge set is a message to Triton's process)."""
        self.stats.streams = len(self.recognizer_streams)
        self.exported_at = time.monotonic()
        self.on_stats(self.stats)

    def start(self) -> None:
        """Drop idle recognizer streams from now on, every SWEEP_EVERY_S (on the running loop)."""
        self.sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            self.drop_idle(time.monotonic())
            self._export()

    def drop_idle(self, now: float) -> None:
        """Drop the recognizer streams that sent nothing for idle_s and are not being heard:
        their gateways went away without a STOP."""
        for stream_id, recognizer_stream in list(self.recognizer_streams.items()):
            if now - recognizer_stream.heard_at > self.idle_s and not recognizer_stream.order.locked():
                self._drop(stream_id, recognizer_stream, f"no request for {self.idle_s:g} s")

    def shutdown(self) -> None:
        """Stop sweeping and hearing (from a thread other than the loop's, which goes on
        running until the sweeper has stopped): passes running end first."""
        if self.sweeper is not None:
            asyncio.run_coroutine_threadsafe(self._stop_sweeping(), self.sweeper.get_loop()).result(timeout=5)
        self.workers.shutdown(wait=True, cancel_futures=True)

    async def _stop_sweeping(self) -> None:
        self.sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.sweeper
