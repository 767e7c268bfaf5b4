"""The Piper family's BLS model, `tts` (`TtsModel`), and its stages: one stream's
requests to the `acoustic` and `vocoder` models. Imported only inside Triton's Python
backend (needs its `pb_utils`)."""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

from contract import models as c
from contract.voices import configured_voices
from python_backends.bls import Bls, string_tensor, tensors
from python_backends.capacity import capacity_outputs
from python_backends.chunking import GROW_AHEAD_S, burst_first_frames, sized_for_load
from python_backends.delivery import chunk_outputs
from python_backends.piper.inputs import VoiceParams, read_tts_request
from python_backends.piper.pipeline import SENTENCE_LOOKAHEAD, LatentPiece, speak
from python_backends.scheduler import DeadlineScheduler, PlaybackClock, Streams
from python_backends.serving import DecoupledModel, gauge, parameters, request_inputs, request_parameter


@dataclass(frozen=True)
class BlsStages:
    """Stages (python_backends.piper.pipeline) of one stream: its voice and parameters
    reach the acoustic stage, its voice and speaker every vocoder window; `stream` names
    it in the logs."""

    bls: Bls
    voice: str
    params: VoiceParams
    stream: str

    async def acoustic_pieces(self, text: str, head: int) -> AsyncIterator[LatentPiece]:
        """One acoustic request for one sentence, its responses as pieces."""
        inputs = [string_tensor(c.TEXT, text), string_tensor(c.VOICE, self.voice), *tensors(self.params.tensors())]
        if head:
            inputs.append(pb_utils.Tensor(c.HEAD_FRAMES, np.array([head], dtype=np.int32)))
        outputs = [c.LATENT, c.DURATIONS, c.WORDS, c.WORD_FRAMES]
        async with aclosing(self.bls.stream(c.ACOUSTIC_MODEL, inputs, outputs)) as responses:
            async for r in responses:
                yield latent_piece(r)

    async def vocode(self, window: np.ndarray) -> np.ndarray:
        inputs = [
            pb_utils.Tensor(c.LATENT, window[None]), string_tensor(c.VOICE, self.voice, (1, 1)),
            pb_utils.Tensor(c.SPEAKER, np.array([[self.params.speaker]], dtype=np.int64)),
        ]
        return (await self.bls.infer(c.VOCODER_MODEL, inputs, c.PCM, window.shape[1], self.stream))[0]


def stream_name(request, client: str) -> str:
    """A request as the logs name it: its id, if its client gave one, and its client."""
    return f"{request.request_id() or id(request)} of {client or 'an anonymous client'}"


def latent_piece(response) -> LatentPiece:
    """An acoustic response as a piece: the inverse of pipeline.acoustic_outputs."""
    output = functools.partial(pb_utils.get_output_tensor_by_name, response)
    spans, names = output(c.WORD_FRAMES).as_numpy(), output(c.WORDS).as_numpy()
    words = tuple((w.decode(), int(a), int(b)) for w, (a, b) in zip(names, spans))
    return LatentPiece(output(c.LATENT).as_numpy(), output(c.DURATIONS).as_numpy(), words)


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
        # stages share the cores, so no more calls run than there are cores (by default:
        # see docs/configuration.md) and none of them is a stream's work far ahead of its need.
        cores = os.cpu_count() or 1
        self.slots = DeadlineScheduler(int(p.get("slots", "0")) or cores, cores)
        self.pad_to_buckets = p.get("pad_to_buckets", "false") == "true"
        self.voices = configured_voices()
        self.metric_family, self.active = gauge(c.TTS_ACTIVE_METRIC, "tts requests being synthesized now")
        self.streams = Streams()

    async def respond(self, request) -> AsyncIterator[dict[str, np.ndarray]]:
        client = request_parameter(request, c.CLIENT_PARAMETER)
        tts = read_tts_request(request_inputs(request, self.model), self.max_text_chars, self.voices)
        rate = tts.voice.sample_rate
        self.active.increment(1)
        try:
            clock = PlaybackClock(rate)
            with self.streams.serving(client, clock):
                # Past its share, a client's first chunk waits for a slot, unless every other stream can wait instead.
                loaded = self.streams.over_share(client, self.slots.share()) and not self.streams.ahead_of(
                    clock, GROW_AHEAD_S)
                chunking, head = sized_for_load(tts.chunking, tts.chunking_asked, loaded)
                stages = BlsStages(self.bls, tts.voice.name, tts.params, stream_name(request, client))
                chunks = speak(
                    tts.sentences, stages, chunking=chunking, head=head,
                    scheduler=self.slots.for_client(client), clock=clock,
                    is_cancelled=request.is_cancelled, pad_to_buckets=self.pad_to_buckets, grow=not tts.chunking_asked,
                    first_floor=lambda: burst_first_frames(self.streams.silent - 1, self.slots.slots, chunking.frames),
                )
                async with aclosing(chunks):
                    async for chunk in chunks:
                        self.slots.capacity.made(chunk.pcm.size / rate)
                        yield chunk_outputs(chunk)
            yield capacity_outputs(self.slots.capacity.streams)  # this stream's work measured too
        finally:
            self.active.increment(-1)

    def finalize(self) -> None:
        self.bls.close()
        del self.active  # a metric goes before its family
        del self.metric_family
