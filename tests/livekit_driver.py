"""Drives speechstream's LiveKit Agents TTS plugin (speechstream/livekit.py) against a
running gateway and prints what happened as JSON on its last line. Runs in the agent
frameworks' environment (.venv-agents, where livekit-agents is) with the repository's
root on its path, driven by tests/integration/test_livekit.py (and perf/frameworks/agents.py):

    .venv-agents/bin/python tests/livekit_driver.py stream URL TEXT [--seed N]
    .venv-agents/bin/python tests/livekit_driver.py synthesize URL TEXT [--seed N]
    .venv-agents/bin/python tests/livekit_driver.py cancel URL LONG_TEXT TEXT [--seed N]
    .venv-agents/bin/python tests/livekit_driver.py ttfa URL N TEXT

- stream: TEXT pushed as an LLM's deltas into `tts.stream()`, then end_input; the audio,
  its word timings and what the TTS says of itself.
- synthesize: `tts.synthesize(TEXT)`, the same report.
- cancel: LONG_TEXT pushed (its end mid-sentence, as an LLM still writing), the stream
  closed at its first audio (an interruption); the gateway's metrics then; then TEXT on a
  second stream; then the TTS closed.
- ttfa: after one warm-up turn, N streams at once on one TTS, each TEXT's deltas pushed
  at once: seconds from each stream's first push_text to its first audio frame.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1]))  # the repository's speechstream, beside the agents' packages

from livekit.agents import tts as agents_tts  # noqa: E402
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT  # noqa: E402

from speechstream.livekit import TTS  # noqa: E402
from tests.agent_turns import deltas, gateway_metrics  # noqa: E402

GAUGES = ("speechstream_connections", "speechstream_contexts", "speechstream_active_streams",
          "speechstream_audio_seconds_total", "speechstream_errors_total")


def metrics(url: str) -> dict[str, float]:
    """The gateway's GAUGES (0 for one it has not yet), summed over their labels."""
    got = gateway_metrics(url)
    return {name: got.get(name, 0.0) for name in GAUGES}


def summary(frames: list, words: list) -> dict:
    """The frames' audio (rate, samples, level), and each word with its times and the
    level of the audio between them."""
    rates, channels = {f.sample_rate for f in frames}, {f.num_channels for f in frames}
    assert len(rates) <= 1 and len(channels) <= 1, (rates, channels)
    rate = rates.pop() if rates else 0
    pcm = b"".join(bytes(f.data) for f in frames)
    samples = np.frombuffer(pcm, "<i2").astype(np.float64) / 32768

    def rms(a: float, b: float) -> float:
        part = samples[int(a * rate):int(b * rate)]
        return float(np.sqrt(np.mean(part**2))) if part.size else 0.0

    return {
        "sample_rate": rate,
        "channels": channels.pop() if channels else 0,
        "samples": int(samples.size),
        "frames": len(frames),
        "peak": float(np.abs(samples).max(initial=0)),
        "rms": rms(0, samples.size / rate) if rate else 0.0,
        "words": [[str(w), w.start_time, w.end_time, rms(w.start_time, w.end_time)] for w in words],
    }


async def collect(stream: agents_tts.SynthesizeStream | agents_tts.ChunkedStream) -> tuple[list, list]:
    """All of a stream's frames, and the TimedStrings the frames carry."""
    frames, words = [], []
    async for event in stream:
        frames.append(event.frame)
        words += event.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])
    return frames, words


async def push(stream: agents_tts.SynthesizeStream, text: str, pause_s: float = 0.0, end: bool = True) -> None:
    for delta in deltas(text):
        stream.push_text(delta)
        await asyncio.sleep(pause_s)  # 0: just a turn of the loop, as deltas come off a socket
    if end:
        stream.end_input()


async def stream_text(url: str, text: str, seed: int | None) -> dict:
    async with TTS(url=url, seed=seed) as tts:
        async with tts.stream() as stream:
            pushing = asyncio.create_task(push(stream, text, pause_s=0.005))
            frames, words = await collect(stream)
            await pushing
        return {**summary(frames, words), "streaming": tts.capabilities.streaming,
                "aligned_transcript": tts.capabilities.aligned_transcript,
                "stream_class": f"{type(stream).__module__}.{type(stream).__name__}"}


async def synthesize(url: str, text: str, seed: int | None) -> dict:
    async with TTS(url=url, seed=seed) as tts:
        async with tts.synthesize(text) as speech:
            frames, words = await collect(speech)
        return summary(frames, words)


async def until(url: str, name: str, value: float, within_s: float) -> float | None:
    """Seconds until the gateway's metric `name` reads `value`; None if not within_s."""
    start = time.perf_counter()
    while time.perf_counter() - start < within_s:
        if metrics(url)[name] == value:
            return time.perf_counter() - start
        await asyncio.sleep(0.02)
    return None


async def cancel(url: str, long_text: str, text: str, seed: int | None) -> dict:
    tts = TTS(url=url, seed=seed)
    try:
        before = metrics(url)
        first = tts.stream()
        await push(first, long_text, end=False)  # the LLM is still writing
        await first.__anext__()  # its first audio: the user speaks over it now
        session = tts.session_id
        await first.aclose()
        contexts_gone_s = await until(url, "speechstream_contexts", 0, 5.0)
        cancelled = metrics(url)
        await asyncio.sleep(1.0)
        later = metrics(url)
        async with tts.stream() as second:
            pushing = asyncio.create_task(push(second, text))
            frames, words = await collect(second)
            await pushing
        after_second = metrics(url)
        next_session = tts.session_id
    finally:
        await tts.aclose()
    closed_s = await until(url, "speechstream_connections", 0, 5.0)
    return {
        "sessions": [session, next_session],
        "contexts_gone_s": contexts_gone_s,
        "cancelled_audio_s": cancelled["speechstream_audio_seconds_total"] - before["speechstream_audio_seconds_total"],
        "audio_after_cancel_s": later["speechstream_audio_seconds_total"] - cancelled["speechstream_audio_seconds_total"],
        "connections": [before["speechstream_connections"], cancelled["speechstream_connections"],
                        after_second["speechstream_connections"]],
        "errors": after_second["speechstream_errors_total"] - before["speechstream_errors_total"],
        "closed_s": closed_s,
        "second": summary(frames, words),
    }


async def ttfa(url: str, streams: int, text: str) -> dict:
    async with TTS(url=url) as tts:
        async with tts.synthesize("Ready.") as warm_up:  # the connection open, the server warm
            await collect(warm_up)

        async def turn() -> tuple[float, float]:
            async with tts.stream() as stream:
                start = time.perf_counter()
                await push(stream, text)
                first, audio_s = None, 0.0
                async for event in stream:
                    first = first or time.perf_counter()
                    audio_s += event.frame.duration
            return first - start, audio_s

        turns = await asyncio.gather(*(turn() for _ in range(streams)))
        return {"streams": streams, "session": tts.session_id, "ttfa_s": [t for t, _ in turns],
                "audio_s": [a for _, a in turns]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("stream", "synthesize", "cancel", "ttfa"))
    parser.add_argument("url")
    parser.add_argument("args", nargs="+")
    parser.add_argument("--seed", type=int)
    a = parser.parse_args()
    if a.mode == "stream":
        result = asyncio.run(stream_text(a.url, a.args[0], a.seed))
    elif a.mode == "synthesize":
        result = asyncio.run(synthesize(a.url, a.args[0], a.seed))
    elif a.mode == "cancel":
        result = asyncio.run(cancel(a.url, a.args[0], a.args[1], a.seed))
    else:
        result = asyncio.run(ttfa(a.url, int(a.args[0]), a.args[1]))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
