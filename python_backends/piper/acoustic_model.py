"""The `acoustic` model, Triton-facing: the Piper family's Talker, one sentence → its
latent frames (engines.AcousticEngine), in two responses when HEAD_FRAMES asks for its
first frames early. Imported only inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np

from contract import models as c
from contract.voices import configured_voices
from python_backends.inputs import read_params, read_text, read_urgent
from python_backends.piper.engines import DEFAULT_HEAD_THREADS, AcousticEngine
from python_backends.piper.inputs import read_phonemes, read_voice, read_voice_params
from python_backends.piper.pipeline import acoustic_outputs
from python_backends.piper.voice import load_voice
from python_backends.priority import pools
from python_backends.serving import DecoupledModel, parameters, request_inputs


class AcousticModel(DecoupledModel):
    model = c.ACOUSTIC_MODEL

    def initialize(self, args) -> None:
        self.voices = configured_voices()
        head_threads = int(parameters(args).get("head_threads", DEFAULT_HEAD_THREADS))
        self.engines = {name: AcousticEngine(load_voice(info), 1, head_threads) for name, info in self.voices.items()}
        # Sentences of all streams share these workers in arrival order, so a new
        # stream's first sentence waits for at most one job (a prior or a flow) per
        # worker; an urgent one waits for none, its workers running above the others.
        self.workers = pools(int(parameters(args).get("workers", "5")), "acoustic")

    async def respond(self, request) -> AsyncIterator[dict[str, np.ndarray]]:
        inputs = request_inputs(request, self.model)
        text, voice = read_text(inputs, c.MAX_SENTENCE_CHARS), read_voice(inputs, self.voices)
        engine = self.engines[voice.name]
        params = read_voice_params(inputs, voice).over(engine.default_params())
        head = read_params(inputs, c.HEAD_PARAMS)
        (phonemes,) = read_phonemes(inputs, [text])
        workers = self.workers[read_urgent(inputs)]
        pieces = engine.pieces(text, params, head[c.HEAD_FRAMES], workers, phonemes, head[c.HEAD_THREADS])
        async for piece in pieces:
            yield acoustic_outputs(piece)

    def finalize(self) -> None:
        for workers in self.workers.values():
            workers.shutdown(cancel_futures=True)
