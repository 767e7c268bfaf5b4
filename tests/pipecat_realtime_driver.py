"""Runs Pipecat's own `OpenAIRealtimeLLMService` (pipecat-ai, as released) in a pipeline
pointed at the gateway's /v1/realtime by its base URL, feeds it a WAV file as a
microphone would (20 ms frames in real time) and prints what came out as JSON. Runs in
the frameworks' environment (.venv-agents); driven by tests/vllm/test_realtime.py:

    .venv-agents/bin/python tests/pipecat_realtime_driver.py URL WAV

The JSON: the user's transcript (Pipecat's TranscriptionFrame, pushed upstream), the
reply's text and audio (TTSTextFrame, TTSAudioRawFrame), whether its TTSStoppedFrame
came, and any error frames.
"""

from __future__ import annotations

import asyncio
import json
import sys
import wave

import numpy as np
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.realtime import events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner

FRAME_MS = 20
RATE = 24000


class Recorder(FrameProcessor):
    """Notes the frames that pass it, either way."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Frame] = []
        self.stopped = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        self.frames.append(frame)
        if isinstance(frame, TTSStoppedFrame):
            self.stopped.set()
        await self.push_frame(frame, direction)


async def main(url: str, wav: str) -> dict:
    with wave.open(wav) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1, "a 24 kHz mono WAV"
        pcm = w.readframes(w.getnframes())
    upstream, downstream = Recorder(), Recorder()  # the user's transcript comes upstream, the reply down
    service = OpenAIRealtimeLLMService(api_key="unused", base_url=url, settings=OpenAIRealtimeLLMService.Settings(
        session_properties=events.SessionProperties(audio=events.AudioConfiguration(input=events.AudioInput(
            transcription=events.InputAudioTranscription(model="whisper-1"))))))
    worker = PipelineWorker(Pipeline([upstream, service, downstream]), idle_timeout_secs=None,
                            params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE))
    errors: list[str] = []
    worker.event_handler("on_pipeline_error")(lambda w, frame: errors.append(str(frame.error)))
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    await asyncio.sleep(1.0)  # the service connects and configures its session
    step = RATE * FRAME_MS // 1000 * 2
    for start in range(0, len(pcm), step):
        await worker.queue_frame(InputAudioRawFrame(pcm[start:start + step], RATE, 1))
        await asyncio.sleep(FRAME_MS / 1000)
    try:
        await asyncio.wait_for(downstream.stopped.wait(), 60)
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, 30)
    audio = b"".join(f.audio for f in downstream.frames if isinstance(f, TTSAudioRawFrame))
    return {
        "transcript": " ".join(f.text for f in upstream.frames if isinstance(f, TranscriptionFrame)),
        "reply": "".join(f.text for f in downstream.frames if isinstance(f, TTSTextFrame)),
        "audio_samples": len(audio) // 2,
        "audio_peak": float(np.abs(np.frombuffer(audio, "<i2")).max(initial=0)) / 32768,
        "rates": sorted({f.sample_rate for f in downstream.frames if isinstance(f, TTSAudioRawFrame)}),
        "stopped": downstream.stopped.is_set(),
        "errors": errors + [str(f.error) for r in (upstream, downstream) for f in r.frames if isinstance(f, ErrorFrame)],
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:3]))))
