"""Runs LiveKit Agents' own OpenAI `RealtimeModel` (livekit-plugins-openai, as released),
pointed at the gateway by its base URL, through its session API without a room (as
LiveKit's own tests do): pushes a WAV file as 20 ms audio frames in real time, reads the
reply the server's turn detection started, and prints what came out as JSON. Runs in the
frameworks' environment (.venv-agents); driven by tests/vllm/test_realtime.py:

    .venv-agents/bin/python tests/livekit_realtime_driver.py BASE_URL WAV
"""

from __future__ import annotations

import asyncio
import json
import sys
import wave

import aiohttp
import numpy as np
from livekit import rtc
from livekit.agents import llm
from livekit.plugins import openai

FRAME_MS = 20
RATE = 24000


async def reply_of(generation: llm.GenerationCreatedEvent) -> tuple[str, list[rtc.AudioFrame]]:
    """A generation's text and audio, read whole."""
    text, frames = "", []
    async for message in generation.message_stream:
        async def read_text(stream=message.text_stream) -> str:
            return "".join([piece async for piece in stream])

        reading = asyncio.create_task(read_text())
        frames += [frame async for frame in message.audio_stream]
        text += await reading
    return text, frames


async def main(base_url: str, wav: str) -> dict:
    with wave.open(wav) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1, "a 24 kHz mono WAV"
        pcm = w.readframes(w.getnframes())
    async with aiohttp.ClientSession() as http:
        model = openai.realtime.RealtimeModel(base_url=base_url, api_key="unused", model="speechstream",
                                              http_session=http)
        session = model.session()
        generations: asyncio.Queue[llm.GenerationCreatedEvent] = asyncio.Queue()
        transcripts, errors = [], []
        session.on("generation_created", generations.put_nowait)
        session.on("input_audio_transcription_completed",
                   lambda ev: ev.is_final and transcripts.append(ev.transcript))  # deltas come as not final
        session.on("error", lambda ev: errors.append(str(ev.error)))
        step = RATE * FRAME_MS // 1000
        samples = np.frombuffer(pcm, "<i2")
        for start in range(0, len(samples), step):
            chunk = samples[start:start + step]
            session.push_audio(rtc.AudioFrame(chunk.tobytes(), RATE, 1, len(chunk)))
            await asyncio.sleep(FRAME_MS / 1000)
        text, frames = await asyncio.wait_for(reply_of(await asyncio.wait_for(generations.get(), 60)), 60)
        await session.aclose()
        await model.aclose()
    audio = np.concatenate([np.frombuffer(f.data, "<i2") for f in frames]) if frames else np.zeros(0, np.int16)
    return {"transcript": " ".join(transcripts), "reply": text, "audio_samples": int(audio.size),
            "audio_peak": float(np.abs(audio).max(initial=0)) / 32768,
            "rates": sorted({f.sample_rate for f in frames}), "errors": errors}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:3]))))
