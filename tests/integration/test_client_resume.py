"""Resuming a context on another gateway: the rule sans I/O (client.resume's Progress and
Splice, against a scripted gateway, cut at every message), the client over fake sockets,
and end to end, two real gateways in front of one real Triton, the first stopped by
SIGTERM mid-paragraph."""

import asyncio
import itertools
import json
import signal

import numpy as np
import pytest

from client import Event, Progress, Router, SpeechClient, frame_samples
from contract import protocol as v1
from perf.workloads import harvard_sentences

RATE, FRAME = 8000, 160  # 20 ms frames

READY = {"type": "ready", "session_id": "s", "format": "pcm_s16le", "sample_rate": RATE, "channels": 1,
         "frame_ms": 20, "voices": [], "without_word_timestamps": ["ar-voice"]}

# Three sentences and their audio's length in samples; each first word starts 10 ms in.
SENTENCES = [("One two three.", 1000), ("Four five, six seven.", 1304), ("Eight.", 696)]

TEXT = " ".join(text for text, _ in SENTENCES)

LEAD = 80

STARTS = [TEXT.index(text) for text, _ in SENTENCES]  # each sentence's start in the text


def sentence_pcm(k: int) -> np.ndarray:
    """Sentence k's audio: the same wherever it is spoken (a seeded voice), and told
    apart from every other sample."""
    return (k * 4000 + np.arange(SENTENCES[k][1])).astype("<i2")


def gateway(first: int, fmt: str = "pcm_s16le") -> list[str | bytes]:
    """What a gateway sends for a context given the text of SENTENCES[first:]: as
    gateway/session.py does, each sentence's `timestamps` just before its audio goes into
    the frames (one frame may hold the end of one sentence and the start of the next),
    the last frame padded and flagged, then `done`."""
    messages: list[str | bytes] = [json.dumps({"type": "audio_start", "context_id": "c", "stream": 1})]
    text_at = audio_at = 0
    pending = np.empty(0, "<i2")
    seq = 0

    def frames(pcm: np.ndarray, last: bool = False) -> None:
        nonlocal seq
        for i in range(0, pcm.size, FRAME):
            payload = pcm[i:i + FRAME].tobytes() if fmt == "pcm_s16le" else f"packet {seq}".encode()
            final = last and i + FRAME >= pcm.size
            messages.append(v1.audio_frame(1, seq, seq * FRAME, payload, final))
            seq += 1

    for k in range(first, len(SENTENCES)):
        text, samples = SENTENCES[k]
        words = text.split()
        start_ms = [(audio_at + LEAD + 200 * i) * 1000 // RATE for i in range(len(words))]
        messages.append(json.dumps({
            "type": "timestamps", "context_id": "c", "words": words, "start_ms": start_ms,
            "end_ms": [t + 20 for t in start_ms], "text_span": [text_at, text_at + len(text)],
        }))
        pending = np.concatenate([pending, sentence_pcm(k)])
        whole = pending.size // FRAME * FRAME
        frames(pending[:whole])
        pending = pending[whole:]
        text_at += len(text) + 1
        audio_at += samples
    frames(np.concatenate([pending, np.zeros(FRAME - pending.size, "<i2")]), last=True)
    messages.append(json.dumps({"type": "done", "context_id": "c", "audio_ms": audio_at * 1000 // RATE}))
    return messages


def listen(cuts: list[int], fmt: str = "pcm_s16le") -> tuple[list[Event], list[list[dict]]]:
    """The events a listener gets from a context spoken by `speak`, its gateway going
    away after `cuts[0]` messages, the next after `cuts[1]` of its own, and so on; and
    the messages each resume sent."""
    ready = READY | {"format": fmt}
    progress, delivered, resumes = Progress(ready), [], []
    progress.sent("speak", TEXT, seed=7)
    splice, first = None, 0
    for cut in [*cuts, None]:
        router = Router()
        for message in gateway(first, fmt)[:cut]:
            event = router.route(message)
            if splice is not None and (event := splice.event(event)) is None:
                continue
            progress.received(event)
            if event.kind != "audio_start":
                delivered.append(event)
        if cut is not None:
            resumes.append(progress.resume())
            splice = progress.splice()
            first = STARTS.index(progress.anchor.text_start)  # the new gateway speaks from there
    return delivered, resumes


UNFAULTED, _ = listen([])


def pcm(events: list[Event]) -> bytes:
    """The speech the listener heard: the frames' samples up to `done`'s audio_ms (the
    last frame's padding, which may differ by where the last resume cut the frames, left out)."""
    done = next(e.message for e in events if e.kind == "done")
    return b"".join(e.frame.payload for e in events if e.frame)[: 2 * done["audio_ms"] * RATE // 1000]


def assert_one_timeline(events: list[Event], ready: dict = READY) -> None:
    """Frames numbered 0, 1, 2, ... and each starting where the one before ended."""
    frames = [e.frame for e in events if e.frame]
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert [f.sample_offset for f in frames[1:]] == [f.sample_offset + frame_samples(f, ready) for f in frames[:-1]]
    assert frames[-1].last and [f.last for f in frames].count(True) == 1


def test_a_gateway_stopped_mid_paragraph_hands_its_listener_to_the_next_every_sentence_heard_once(triton, gateways):
    """Two real gateways in front of one Triton; the first, told to stop (SIGTERM, `--drain
    1`), drains for a second and closes with 1001 mid-paragraph; the client goes on with
    the second. The listener's audio is the unfaulted audio of the same text (the same
    seed) sentence by sentence, on one timeline without a gap, and ends `done`."""
    text = " ".join(harvard_sentences()[:20])
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

