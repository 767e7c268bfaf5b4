"""The `tts` model, Triton-facing: the Piper family's BLS model, its stages called over
BLS (bls.BlsStages). Imported only inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import aclosing

import numpy as np

from contract import models as c
from contract.voices import configured_voices
from python_backends.bls import Bls
from python_backends.capacity import capacity_outputs
from python_backends.chunking import GROW_AHEAD_S, burst_first_frames, sized_for_load
from python_backends.delivery import chunk_outputs
from python_backends.piper.bls import BlsStages
from python_backends.piper.inputs import read_tts_request
from python_backends.piper.pipeline import SENTENCE_LOOKAHEAD, speak
from python_backends.scheduler import DeadlineScheduler, PlaybackClock, Streams
from python_backends.serving import (
    DecoupledModel,
    GaugeByLabel,
    gauge,
    parameters,
    request_inputs,
    request_parameter,
)


def request_label(request, client: str) -> str:
    """A request as the logs name it: its id, if its client gave one, and its client."""
    return f"{request.request_id() or id(request)} of {client or 'an anonymous client'}"


class TtsModel(DecoupledModel):
    """The `tts` model: sentences → acoustic → chunked vocoder → audio chunks
    (pipeline.speak), the calls of all streams in one scheduler."""

    model = c.TTS_MODEL

    def initialize(self, args) -> None:
        p = parameters(args)
        self.max_text_chars = int(p.get("max_text_chars", c.MAX_TEXT_CHARS))
        # Each open acoustic request waits in a thread; a stream keeps SENTENCE_LOOKAHEAD open.
        self.bls = Bls(waiters=int(p.get("max_streams", "256")) * SENTENCE_LOOKAHEAD)
        # Calls in flight to both stages together, handed to the client with the fewest
        # running, then to the stream whose listener needs audio soonest: on a CPU the
        # stages share the cores, so by default one more call runs than there are cores,
        # to keep them busy across the calls' hops, and urgent calls (a first packet) may
        # run on as many more as there are cores, computed above the others (see
        # docs/configuration.md).
        cores = os.cpu_count() or 1
        slots, urgent_slots = int(p.get("slots", "0")) or cores + 1, int(p.get("urgent_slots", "0")) or cores
        self.scheduler = DeadlineScheduler(slots, cores, urgent_slots)
        self.pad_to_buckets = p.get("pad_to_buckets", "false") == "true"
        self.voices = configured_voices()
        self.metric_family, self.active = gauge(c.TTS_ACTIVE_METRIC, "tts requests being synthesized now")
        self.active_by_gateway = GaugeByLabel(c.TTS_ACTIVE_BY_GATEWAY_METRIC,
                                              "tts requests being synthesized now, by the gateway that sent them",
                                              c.GATEWAY_LABEL)
        self.streams = Streams()

    async def respond(self, request) -> AsyncIterator[dict[str, np.ndarray]]:
        client = request_parameter(request, c.CLIENT_PARAMETER)
        tts = read_tts_request(request_inputs(request, self.model), self.max_text_chars, self.voices)
        rate = tts.voice.sample_rate
        gateway = request_parameter(request, c.GATEWAY_PARAMETER)
        # The total first and last: a reading between the two counts a gateway's own
        # request as another's (fleet.py), never the reverse.
        self.active.increment(1)
        self.active_by_gateway.increment(gateway, 1)
        try:
            clock = PlaybackClock(rate)
            with self.streams.serving(client, clock):
                # Past its share, a client's first chunk waits for a slot, unless every other stream can wait instead.
                loaded = self.streams.over_share(client, self.scheduler.share()) and not self.streams.ahead_of(
                    clock, GROW_AHEAD_S)
                chunking, head = sized_for_load(tts.chunking, tts.chunking_asked, loaded)
                stages = BlsStages(self.bls, tts.voice.name, tts.params, request_label(request, client))
                chunks = speak(
                    tts.sentences, stages, chunking=chunking, head=head,
                    scheduler=self.scheduler.for_client(client), clock=clock,
                    is_cancelled=request.is_cancelled, pad_to_buckets=self.pad_to_buckets, grow=not tts.chunking_asked,
                    first_floor=lambda: burst_first_frames(self.streams.silent - 1, self.scheduler.slots, chunking.frames),
                )
                async with aclosing(chunks):
                    async for chunk in chunks:
                        self.scheduler.meter.made(chunk.pcm.size / rate)
                        yield chunk_outputs(chunk)
            yield capacity_outputs(self.scheduler.meter.capacity)  # this stream's work measured too
        finally:
            self.active_by_gateway.increment(gateway, -1)
            self.active.increment(-1)

    def finalize(self) -> None:
        self.bls.close()
        self.active_by_gateway.close()
        del self.active  # a metric goes before its family
        del self.metric_family
