"""The `talker` model, Triton-facing: a sentence → frames of codec codes, streamed from a
vLLM engine (talker.TalkerEngine) that runs on an event loop thread of its own, as
Triton's vllm_backend runs it. Responses leave through a ResponseLoop, so vLLM's loop
never waits on Triton; `finalize` lets the requests in flight finish first. Imported
only inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path

import numpy as np

from contract import models as c
from python_backends.ar.inputs import read_talker_request
from python_backends.ar.orpheus import frame_budget
from python_backends.ar.talker import TalkerStats, TalkerEngine
from python_backends.serving import DecoupledModel, ResponseLoop, gauge, log_error, parameters, request_inputs

DRAIN_S = 10.0  # the longest finalize waits for requests in flight

GAUGES = (
    (c.TALKER_RUNNING_METRIC, "Talker requests in vLLM's batch"),
    (c.TALKER_WAITING_METRIC, "Talker requests waiting for a place in vLLM's batch"),
    (c.TALKER_TOKENS_METRIC, "codec tokens vLLM has written since the Talker started"),
    (c.TALKER_PEAK_METRIC, "the most Talker requests vLLM has run in one batch since the Talker started"),
    (c.TALKER_GUIDED_METRIC, "Talker streams decoded as a classifier-free guidance pair"),
    (c.TALKER_GUIDANCE_LOST_METRIC, "guided Talker streams whose pair fell out of lock-step (decoded unguided from there)"),
)


class TalkerModel(DecoupledModel):
    model = c.TALKER_MODEL

    def initialize(self, args) -> None:
        p = parameters(args)
        multiprocessing.set_executable(sys.executable)  # for vLLM's engine processes
        gauges = [gauge(name, about) for name, about in GAUGES]
        self.families = [family for family, _ in gauges]
        self.gauges = [metric for _, metric in gauges]
        self.running_streams: set[str] = set()  # STREAM_IDs streaming
        self.stopped: set[str] = set()  # and those a STOP named
        self.in_flight = 0  # requests handed to the loop and not ended
        self.idle = threading.Condition()
        self.responses = ResponseLoop()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="talker-loop", daemon=True)
        self.thread.start()
        model = Path(os.environ["SPEECHSTREAM_AR_MODEL"]) / "talker"
        start = self._start(model, p.get("dtype", "float32"), int(p.get("max_model_len", "4096")),
                            p.get("enforce_eager", "true") == "true")
        self.engine = asyncio.run_coroutine_threadsafe(start, self.loop).result()

    async def _start(self, model: Path, dtype: str, max_model_len: int, eager: bool) -> TalkerEngine:
        return TalkerEngine(model, dtype=dtype, max_model_len=max_model_len, eager=eager, on_stats=self._export)

    def _export(self, stats: TalkerStats) -> None:
        """vLLM's counts on Triton's metrics port."""
        values = (stats.running, stats.waiting, stats.generated_tokens, stats.peak_running, stats.guided,
                  stats.guidance_lost)
        for metric, value in zip(self.gauges, values):
            metric.set(value)

    def execute(self, requests) -> None:
        for request in requests:
            with self.idle:
                self.in_flight += 1
            asyncio.run_coroutine_threadsafe(self._serve_counted(request), self.loop)

    async def _serve_counted(self, request) -> None:
        try:
            await self.serve(request)
        finally:
            with self.idle:
                self.in_flight -= 1
                self.idle.notify_all()

    def deliver(self, sender, outputs=None, error_message=None) -> None:
        self.responses.put(sender, outputs, error_message)

    async def respond(self, request) -> AsyncIterator[dict[str, np.ndarray]]:
        talk = read_talker_request(request_inputs(request, self.model))
        if isinstance(talk, str):  # STOP: the stream of that name, if it runs, ends at its next frame
            if talk in self.running_streams:
                self.stopped.add(talk)
            return
        budget = frame_budget(talk.text, talk.params.max_frames)
        params = replace(talk.params, max_frames=budget)
        self.running_streams.add(talk.stream_id)
        try:
            async with aclosing(self.engine.frames(talk.text, talk.voice, params)) as frames:
                async for codes in frames:
                    if talk.stream_id in self.stopped:
                        break  # closing the frames aborts the vLLM request
                    yield {c.CODES: codes.astype(np.int32)}
        finally:
            self.running_streams.discard(talk.stream_id)
            self.stopped.discard(talk.stream_id)

    def finalize(self) -> None:
        with self.idle:  # let the requests in flight end
            if not self.idle.wait_for(lambda: self.in_flight == 0, timeout=DRAIN_S):
                log_error(f"talker: unloading with {self.in_flight} requests still in flight after {DRAIN_S:g} s")
        self.engine.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.responses.close(timeout=10)
        del self.gauges  # metrics go before their families
        del self.families
