"""The Python client library against the running gateway."""

import asyncio

import pytest

from perf.tools.workloads import workload
from speechstream import protocol as v1
from speechstream.client import SpeechClient, SpeechError, SyncSpeechClient


def contiguous(frames: list[v1.AudioFrame]) -> bool:
    return bool(frames) and frames[-1].last and [f.seq for f in frames] == list(range(len(frames)))


def test_async_contexts_run_side_by_side_on_one_connection(gateway):
    async def run():
        config = {"format": "pcm_s16le", "sample_rate": 24000, "timestamps": True, "seed": 7}
        async with await SpeechClient.connect(gateway, **config) as client:
            assert client.ready["format"] == "pcm_s16le" and client.ready["sample_rate"] == 24000
            whole, deltas, cancelled = client.context(), client.context(), client.context("gone")
            await whole.speak(workload("short"))
            for word in workload("short").split(" "):
                await deltas.text(word + " ")
            await deltas.close()
            await cancelled.speak(workload("long"))
            await cancelled.cancel()

            async def collect(context):
                return [event async for event in context.messages()]

            return await asyncio.gather(collect(whole), collect(deltas), collect(cancelled)), whole, deltas

    (a, b, gone), whole, deltas = asyncio.run(run())
    for events, context in ((a, whole), (b, deltas)):
        frames = [e for e in events if isinstance(e, v1.AudioFrame)]
        assert contiguous(frames) and context.done["audio_ms"] > 2000
        assert any(isinstance(e, dict) and e["type"] == "timestamps" for e in events)
    # Same seed, same sentence: the deltas give the same audio as the whole text.
    assert len([e for e in a if isinstance(e, v1.AudioFrame)]) == len([e for e in b if isinstance(e, v1.AudioFrame)])
    assert gone[-1]["type"] == "cancelled"


def test_async_errors_raise_speech_error(gateway):
    async def run():
        with pytest.raises(SpeechError) as refused:
            await SpeechClient.connect(gateway, voice="nobody")
        async with await SpeechClient.connect(gateway) as client:
            context = client.context()
            await context.speak("word " * 30_000)
            with pytest.raises(SpeechError) as too_long:
                async for _ in context.frames():
                    pass
        return refused.value.code, too_long.value.code

    assert asyncio.run(run()) == (v1.UNKNOWN_VOICE, v1.TEXT_TOO_LONG)


def test_sync_client_speaks(gateway):
    with SyncSpeechClient.connect(gateway, format="pcm_s16le", sample_rate=16000) as client:
        first = list(client.speak("One sentence."))
        second = list(client.speak("And another one, a little longer."))
        with pytest.raises(SpeechError) as refused:
            list(client.speak("x" * 30_000))
    assert contiguous(first) and contiguous(second) and len(second) > len(first)
    assert all(len(f.payload) == 2 * 16000 * 20 // 1000 for f in first)
    assert refused.value.code == v1.TEXT_TOO_LONG
