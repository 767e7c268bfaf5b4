"""The `tts_ar` model, Triton-facing: the autoregressive family's BLS model, its stages
called over BLS (bls.BlsStages). Imported only inside Triton's Python backend (needs its
`pb_utils`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import numpy as np

from contract import models as c
from python_backends.ar import orpheus
from python_backends.ar.bls import BlsStages
from python_backends.ar.inputs import read_tts_ar_request
from python_backends.ar.pipeline import speak
from python_backends.bls import Bls
from python_backends.capacity import CapacityMeter, capacity_outputs
from python_backends.delivery import chunk_outputs
from python_backends.scheduler import PlaybackClock
from python_backends.serving import DecoupledModel, counter, parameters, request_inputs


class TtsArModel(DecoupledModel):
    """The `tts_ar` model: sentences → talker → chunked code2wav → audio chunks
    (pipeline.speak); the Talker's vLLM engine batches the streams."""

    model = c.TTS_AR_MODEL

    def initialize(self, args) -> None:
        p = parameters(args)
        self.max_text_chars = int(p.get("max_text_chars", c.MAX_TEXT_CHARS))
        self.bls = Bls(waiters=int(p.get("max_streams", "256")))  # a Talker request each
        self.meter = CapacityMeter(workers=1)  # one batched engine, busy while any stream is open
        self.open = 0  # streams open
        counters = [counter(name, about) for name, about in (
            (c.TTS_AR_FIRST_CHUNKS_METRIC, "tts_ar requests that got a first chunk"),
            (c.TTS_AR_FIRST_FRAMES_METRIC, "seconds from tts_ar requests to their first chunk's frames (the Talker)"),
            (c.TTS_AR_FIRST_DECODE_METRIC, "seconds from those frames to their audio (Code2Wav)"),
        )]
        self.families = [family for family, _ in counters]
        self.first_chunks, self.first_frames_s, self.first_decode_s = (metric for _, metric in counters)

    def _first_chunk(self, frames_in_s: float, decoded_s: float) -> None:
        self.first_chunks.increment(1)
        self.first_frames_s.increment(frames_in_s)
        self.first_decode_s.increment(decoded_s - frames_in_s)

    async def respond(self, request) -> AsyncIterator[dict[str, np.ndarray]]:
        tts = read_tts_ar_request(request_inputs(request, self.model), self.max_text_chars)
        stages = BlsStages(self.bls, tts.voice, tts.params, f"{request.request_id() or id(request)}")
        chunks = speak(tts.sentences, stages, tts.chunking, orpheus.SAMPLES_PER_FRAME,
                       PlaybackClock(c.AR_SAMPLE_RATE), request.is_cancelled, self._first_chunk)
        self.open += 1
        self.meter.running(self.open)
        try:
            async with aclosing(chunks):
                async for chunk in chunks:
                    self.meter.made(chunk.pcm.size / c.AR_SAMPLE_RATE)
                    yield chunk_outputs(chunk)
        finally:
            self.open -= 1
            self.meter.running(self.open)
        yield capacity_outputs(self.meter.capacity)  # this stream's work measured too

    def finalize(self) -> None:
        self.bls.close()
        del self.first_chunks, self.first_frames_s, self.first_decode_s  # metrics go before their families
        del self.families
