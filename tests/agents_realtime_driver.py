"""Runs the OpenAI Agents SDK's `RealtimeRunner` (openai-agents, as released) with a
`RealtimeAgent`, its model's URL pointed at the gateway's /v1/realtime, feeds it a WAV
file as 20 ms of audio at a time in real time and prints what the session played as JSON.
Runs in the frameworks' environment (.venv-agents); driven by tests/vllm/test_realtime.py:

    .venv-agents/bin/python tests/agents_realtime_driver.py URL WAV
"""

from __future__ import annotations

import asyncio
import json
import sys
import wave

import numpy as np
from agents.realtime import RealtimeAgent, RealtimeRunner

FRAME_MS = 20
RATE = 24000


async def speak(session, pcm: bytes) -> None:
    step = RATE * FRAME_MS // 1000 * 2
    for start in range(0, len(pcm), step):
        await session.send_audio(pcm[start:start + step])
        await asyncio.sleep(FRAME_MS / 1000)


async def main(url: str, wav: str) -> dict:
    with wave.open(wav) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1, "a 24 kHz mono WAV"
        pcm = w.readframes(w.getnframes())
    agent = RealtimeAgent(name="Assistant", instructions="Answer in one short sentence.")
    runner = RealtimeRunner(agent, config={"model_settings": {
        "model_name": "speechstream", "input_audio_transcription": {"model": "whisper-1"},
        "turn_detection": {"type": "server_vad"}}})
    audio, transcripts, reply, errors = bytearray(), [], "", []
    session = await runner.run(model_config={"url": url, "api_key": "unused"})
    async with session:
        speaking = asyncio.create_task(speak(session, pcm))
        async with asyncio.timeout(90):
            async for event in session:
                if event.type == "audio":
                    audio += event.audio.data
                elif event.type == "error":
                    errors.append(str(event.error))
                elif event.type == "raw_model_event" and event.data.type == "input_audio_transcription_completed":
                    transcripts.append(event.data.transcript)
                elif event.type == "raw_model_event" and event.data.type == "transcript_delta":
                    reply += event.data.delta
                elif event.type == "audio_end":
                    break
        await speaking
    samples = np.frombuffer(bytes(audio), "<i2")
    return {"transcript": " ".join(transcripts), "reply": reply, "audio_samples": int(samples.size),
            "audio_peak": float(np.abs(samples).max(initial=0)) / 32768, "errors": errors}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:3]))))
