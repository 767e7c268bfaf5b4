"""Calibration: the capacity the soak's load is set from, in audio-seconds per wall second."""

from __future__ import annotations

import asyncio
import random
import time

from perf.soak.listener import random_text
from speechstream.client import SpeechClient


async def calibrate(url: str, seconds: float, streams: int, rng: random.Random) -> float:
    """Audio-seconds per wall second with `streams` concurrent speaks read as fast as possible."""
    received = 0.0

    async def stream(r: random.Random) -> None:
        nonlocal received
        client = await SpeechClient.connect(url)
        frame_s = client.ready["frame_ms"] / 1000
        try:
            while True:
                async for _ in client.speak(random_text(r)):
                    received += frame_s
        finally:
            client.ws.transport.abort()  # a close handshake would wait behind unread audio

    tasks = [asyncio.create_task(stream(random.Random(rng.random()))) for _ in range(streams)]
    # The first quarter warms up (first inferences are slow) and is not counted.
    await asyncio.wait(tasks, timeout=seconds / 4, return_when=asyncio.FIRST_EXCEPTION)
    start, before = time.monotonic(), received
    done, _ = await asyncio.wait(tasks, timeout=seconds * 3 / 4, return_when=asyncio.FIRST_EXCEPTION)
    capacity = (received - before) / (time.monotonic() - start)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if done:  # the streams loop until cancelled: a finished one failed
        raise RuntimeError(f"calibration failed: {done.pop().exception()!r}")
    return capacity
