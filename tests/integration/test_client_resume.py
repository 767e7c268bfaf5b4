"""Resuming a context on another gateway end to end: two real gateways in front of one
real Triton, the first stopped by SIGTERM mid-paragraph. (The rule sans I/O and the client
over fake sockets: tests/unit/test_client_resume.py.)"""

import asyncio
import itertools
import signal

import numpy as np
import pytest

from perf.tools.workloads import harvard_sentences
from speechstream.client import Event, SpeechClient
from tests.unit.test_client_resume import READY, assert_one_timeline


def test_a_gateway_stopped_mid_paragraph_hands_its_listener_to_the_next_every_sentence_heard_once(triton, gateways):
    """Two real gateways in front of one Triton; the first, told to stop (SIGTERM, `--drain
    1`), drains for a second and closes with 1001 mid-paragraph; the client goes on with
    the second. The listener's audio is the unfaulted audio of the same text (the same
    seed) sentence by sentence, on one timeline without a gap, and ends `done`."""
    text = " ".join(harvard_sentences()[:60])  # its synthesis takes longer than the drain, on a fast host too
    config = {"format": "pcm_s16le", "sample_rate": 24000, "seed": 11, "timestamps": True}
    flags = ("--probe-interval", "0", "--admission-load", "0")
    a = gateways.start(triton.grpc_url, *flags, "--drain", "1", name="a")
    b = gateways.start(triton.grpc_url, *flags, name="b")
    urls = [a.url, b.url]

    async def unfaulted() -> list[Event]:
        async with await SpeechClient.connect(urls[1], **config) as client:
            context = client.context()
            await context.speak(text)
            return [e async for e in context.events()]

    async def resumed() -> tuple[list[Event], list[Event]]:
        async with await SpeechClient.connect(urls, resume=True, **config) as client:
            context = client.context()
            await context.speak(text)
            before, after = [], []
            async for event in context.events():
                (after if client.resumes else before).append(event)
                if event.frame and event.frame.seq == 2:
                    a.process.send_signal(signal.SIGTERM)
            return before, after

    whole = asyncio.run(unfaulted())
    before, after = asyncio.run(asyncio.wait_for(resumed(), 120))
    assert a.process.wait(10) == 0

    ready = READY | {"sample_rate": 24000}
    heard = before + after
    assert any(e.frame for e in before) and any(e.frame for e in after)  # cut mid-paragraph
    assert_one_timeline(heard, ready)
    assert heard[-1].kind == "done" and heard[-1].message["audio_ms"] == pytest.approx(whole[-1].message["audio_ms"], abs=20)
    # Every sentence once, in order, its words where they were.
    said, told = [e.message for e in whole if e.kind == "timestamps"], [e.message for e in heard if e.kind == "timestamps"]
    assert [m["text_span"] for m in told] == [m["text_span"] for m in said]
    assert np.allclose([t for m in told for t in m["start_ms"]], [t for m in said for t in m["start_ms"]], atol=2)
    # And sounds as it did, sentence by sentence, within a millisecond. (Not to the sample:
    # a sentence said again is resampled from its own start, a fraction of a sample off.)
    ours, theirs = (np.frombuffer(b"".join(e.frame.payload for e in events if e.frame), "<i2").astype(np.float32)
                    for events in (heard, whole))
    starts = [m["start_ms"][0] * 24 for m in said] + [min(ours.size, theirs.size)]
    for (start, end), m in zip(itertools.pairwise(starts), said):
        assert best_correlation(ours[start:end], theirs[start:end], max_lag=24) > 0.97, m["text_span"]


def best_correlation(signal: np.ndarray, reference: np.ndarray, max_lag: int) -> float:
    """Their correlation, at the lag of at most `max_lag` samples either way where it is highest."""
    n = reference.size - 2 * max_lag
    return max(float(np.corrcoef(signal[lag:lag + n], reference[max_lag:max_lag + n])[0, 1]) for lag in range(2 * max_lag + 1))

