"""The `talker` model, Triton-facing: a sentence → frames of codec codes, streamed from a
vLLM engine (talker.TalkerEngine) on an event loop thread of its own (vllm_serving.VllmModel).
Imported only inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path

import numpy as np

from contract import models as c
from python_backends.ar.inputs import read_talker_request
from python_backends.ar.orpheus import frame_budget
from python_backends.ar.talker import TalkerEngine
from python_backends.serving import request_inputs
from python_backends.vllm_serving import VllmModel, engine_gauges

STOP_KEPT_S = 60.0  # how long a STOP for a stream that is not running is kept for it


class TalkerModel(VllmModel):
    model = c.TALKER_MODEL
    gauges = engine_gauges("Talker", c.TALKER_RUNNING_METRIC, c.TALKER_WAITING_METRIC, c.TALKER_TOKENS_METRIC,
                           c.TALKER_PEAK_METRIC, tokens="codec tokens") + (  # then TalkerStats' own fields, in their order
        (c.TALKER_GUIDED_METRIC, "Talker streams decoded as a classifier-free guidance pair"),
        (c.TALKER_GUIDANCE_LOST_METRIC,
         "guided Talker streams whose pair fell out of lock-step (decoded unguided from there)"),
    )

    async def start_engine(self, parameters: dict[str, str]) -> TalkerEngine:
        self.running_streams: set[str] = set()  # STREAM_IDs streaming
        self.stopped: dict[str, float] = {}  # STREAM_IDs a STOP named, and when
        model = Path(os.environ["SPEECHSTREAM_AR_MODEL"]) / "talker"
        return TalkerEngine(model, **self.engine_options(parameters), on_stats=self.export)

    async def respond(self, request) -> AsyncIterator[dict[str, np.ndarray]]:
        talk = read_talker_request(request_inputs(request, self.model))
        if isinstance(talk, str):  # STOP: the stream of that name ends at its next frame
            # Kept even when no such stream runs yet: the two are separate requests, and
            # one issued but not yet begun here (a task on this loop, a request in
            # Triton's queue) would otherwise miss its STOP and speak its whole sentence
            # to no one. A STOP for a stream that already ended is forgotten after STOP_KEPT_S.
            now = time.monotonic()
            self.stopped = {name: at for name, at in self.stopped.items() if now - at < STOP_KEPT_S or
                            name in self.running_streams}
            self.stopped[talk] = now
            return
        if talk.stream_id is not None and self.stopped.pop(talk.stream_id, None) is not None:
            return  # stopped before it started
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
            self.stopped.pop(talk.stream_id, None)
