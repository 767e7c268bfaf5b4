"""The `asr` model, Triton-facing: recognizer streams' audio → their utterances' events
(listening.Listening over utterances.Utterances; Silero VAD, Whisper and Smart Turn from
engines),
on an event loop thread of its own (serving.EngineModel). Imported only inside Triton's
Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import numpy as np
import triton_python_backend_utils as pb_utils

from contract import models as c
from python_backends.asr.engines import SileroVad, SmartTurn, WhisperTranscriber
from python_backends.asr.inputs import read_asr_request
from python_backends.asr.listening import Listening
from python_backends.asr.smart_turn_model import SmartTurnMissing, smart_turn_path
from python_backends.asr.utterances import Event, Policy
from python_backends.serving import EngineModel, request_inputs


class AsrModel(EngineModel):
    model = c.ASR_MODEL
    gauges = (  # in AsrStats' order
        (c.ASR_STREAMS_METRIC, "recognizer streams open"),
        (c.ASR_PASSES_METRIC, "recognizer passes (Whisper over an utterance so far) since it started"),
        (c.ASR_PASS_SECONDS_METRIC, "seconds those passes took"),
        (c.ASR_AUDIO_SECONDS_METRIC, "seconds of audio the recognizer has heard since it started"),
    )

    async def start_engine(self, parameters: dict[str, str]) -> Listening:
        threads = int(parameters.get("threads", "0")) or os.cpu_count() or 1
        listening = Listening(
            SileroVad().stream, WhisperTranscriber(threads), threads, int(parameters.get("max_streams", "256")),
            float(parameters.get("idle_s", "60")), Policy(partial_every_ms=int(parameters.get("partial_every_ms", "300"))),
            turn_detector(), on_stats=self.export, warn=pb_utils.Logger.log_warn)
        listening.start()
        return listening

    async def respond(self, request) -> AsyncIterator[dict[str, np.ndarray]]:
        for event in await self.engine.hear(read_asr_request(request_inputs(request, self.model)), request.is_cancelled):
            yield outputs(event)


def turn_detector() -> SmartTurn | None:
    """Smart Turn, or none (listen's "smart" then ends turns by their silence alone) where it was not fetched."""
    try:
        return SmartTurn(smart_turn_path())
    except SmartTurnMissing as e:
        pb_utils.Logger.log_error(f"asr: no turn detector, turns end at their endpoint's silence: {e}")
        return None


def outputs(event: Event) -> dict[str, np.ndarray]:
    return {c.EVENT: np.array([event.kind.encode()], dtype=object),
            c.UTTERANCE: np.array([event.utterance], dtype=np.int32),
            c.AUDIO_MS: np.array([event.audio_ms], dtype=np.int64),
            c.TEXT: np.array([event.text.encode()], dtype=object)}
