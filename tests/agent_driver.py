"""Speaks a text through an agent framework's OpenAI TTS client, pointed at our server,
and prints what came back as JSON: the PCM's sample rate, channels, samples and level.
Runs in the frameworks' own environment (.venv-agents, tests/agents-requirements.txt),
driven by tests/integration/test_agent_frameworks.py:

    .venv-agents/bin/python tests/agent_driver.py {livekit,livekit-stream,pipecat} BASE_URL TEXT

Each client runs with its defaults (model, voice, format); only the server and a key are
given, as a user pointing the framework at an OpenAI-compatible server would.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys

import numpy as np


def summary(pcm: bytes, sample_rate: int, channels: int, pieces: int) -> dict:
    samples = np.frombuffer(pcm, "<i2").astype(np.float64) / 32768
    return {
        "sample_rate": sample_rate,
        "channels": channels,
        "samples": samples.size // channels,
        "pieces": pieces,
        "peak": float(np.abs(samples).max(initial=0)),
        "rms": float(np.sqrt(np.mean(samples**2))) if samples.size else 0.0,
    }


async def livekit(base_url: str, text: str, stream: bool) -> dict:
    """LiveKit Agents' `openai.TTS`: `synthesize` (one request, the plugin's only path:
    it is not a streaming TTS), or `StreamAdapter` over it, which is how an AgentSession
    streams a non-streaming TTS (text in as it comes, one request per sentence)."""
    from livekit.agents import tts as agents_tts
    from livekit.plugins import openai

    tts = openai.TTS(base_url=base_url, api_key="unused")
    frames = []
    try:
        if stream:
            adapter = agents_tts.StreamAdapter(tts=tts)
            async with adapter.stream() as speech:
                for word in text.split(" "):  # as an LLM's tokens arrive
                    speech.push_text(word + " ")
                speech.end_input()
                frames = [ev.frame async for ev in speech]
        else:
            async with tts.synthesize(text) as speech:
                frames = [ev.frame async for ev in speech]
    finally:
        await tts.aclose()
    if not frames:
        return summary(b"", tts.sample_rate, tts.num_channels, 0)
    rates, channels = {f.sample_rate for f in frames}, {f.num_channels for f in frames}
    assert len(rates) == len(channels) == 1, (rates, channels)
    return summary(b"".join(bytes(f.data) for f in frames), rates.pop(), channels.pop(), len(frames))


async def pipecat(base_url: str, text: str) -> dict:
    """Pipecat's `OpenAITTSService` in a pipeline, as a bot has it: a TTSSpeakFrame in,
    TTSAudioRawFrames out to the next processor, run to the EndFrame."""
    import soundfile
    from pipecat.frames.frames import EndFrame, Frame, TTSAudioRawFrame, TTSSpeakFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineWorker
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.openai.tts import OpenAITTSService
    from pipecat.workers.runner import WorkerRunner

    audio: list[TTSAudioRawFrame] = []
    errors: list[str] = []

    class Sink(FrameProcessor):  # what a transport's output would play
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                audio.append(frame)
            await self.push_frame(frame, direction)

    tts = OpenAITTSService(api_key="unused", base_url=base_url)
    worker = PipelineWorker(Pipeline([tts, Sink()]))

    @worker.event_handler("on_pipeline_error")
    async def on_pipeline_error(worker, frame) -> None:
        errors.append(frame.error)

    await worker.queue_frames([TTSSpeakFrame(text), EndFrame()])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()
    if errors:
        raise RuntimeError(f"pipecat: {errors}")
    if not audio:
        return summary(b"", tts.sample_rate, 1, 0)
    rates, channels = {f.sample_rate for f in audio}, {f.num_channels for f in audio}
    assert len(rates) == len(channels) == 1, (rates, channels)
    rate, channel = rates.pop(), channels.pop()
    # Pipecat hands on raw PCM; soundfile reads it as the 16-bit PCM it says it is.
    pcm, _ = soundfile.read(io.BytesIO(b"".join(f.audio for f in audio)), dtype="int16", format="RAW",
                            subtype="PCM_16", endian="LITTLE", samplerate=rate, channels=channel)
    return summary(pcm.tobytes(), rate, channel, len(audio))


def main() -> None:
    client, base_url, text = sys.argv[1:4]
    if client == "pipecat":
        result = asyncio.run(pipecat(base_url, text))
    else:
        result = asyncio.run(livekit(base_url, text, stream=client == "livekit-stream"))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
