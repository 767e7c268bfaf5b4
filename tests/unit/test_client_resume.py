"""Resuming a context on another gateway: the rule sans I/O (speechstream.client.resume's Progress and
Splice, against a scripted gateway, cut at every message), the client over fake sockets,
and end to end, two real gateways in front of one real Triton, the first stopped by
SIGTERM mid-paragraph."""

import asyncio
import json

import numpy as np
import pytest
import websockets
from websockets.frames import Close

from speechstream import protocol as v1
from speechstream.client import Event, Progress, Reconnect, Router, SpeechClient, SpeechError, frame_samples
from speechstream.client.events import CONNECTION_CLOSED, RESUME_FAILED

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
    gateway/protocols/session.py does, each sentence's `timestamps` just before its audio goes into
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

CUTS = range(2, len(gateway(0)) - 1)  # after audio_start, before done: every message


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


@pytest.mark.parametrize("cut", CUTS)
def test_pcm_resumed_at_any_message_is_the_unfaulted_audio_every_sentence_once(cut):
    events, [resent] = listen([cut])
    assert pcm(events) == pcm(UNFAULTED)
    assert_one_timeline(events)
    messages = [e.message for e in events if e.message]
    assert messages == [e.message for e in UNFAULTED if e.message]  # timestamps once each, and done's audio_ms
    # The text resent is the unfaulted text from a sentence's start, opened with the seed, closed.
    assert resent[0]["type"] == "text" and resent[0]["seed"] == 7 and TEXT.endswith(resent[0]["text"])
    assert resent[0]["text"].startswith(tuple(text for text, _ in SENTENCES)) and resent[-1] == {"type": "close"}


def test_the_text_resent_starts_at_the_last_sentence_whose_first_word_was_heard():
    # Its start is before its first word, so every sentence before it was heard whole; the
    # end of the one before may still be in the gateway's last partial frame.
    messages = gateway(0)
    second = next(i for i, m in enumerate(messages) if isinstance(m, str) and '"Four' in m)
    first_word = next(  # the frame that holds the second sentence's first word's first millisecond
        i for i, m in enumerate(messages)
        if isinstance(m, bytes) and v1.parse_audio_frame(m).sample_offset + FRAME >= SENTENCES[0][1] + LEAD + RATE // 1000)
    for cut, resent in ((second + 1, TEXT), (first_word, TEXT), (first_word + 1, TEXT[STARTS[1]:])):
        _, [messages_sent] = listen([cut])
        assert [m["text"] for m in messages_sent if m["type"] == "text"] == [resent], cut


@pytest.mark.parametrize("cuts", [[5, 3], [8, 2, 4], [3, 3, 3, 3]])
def test_a_context_resumed_again_and_again_is_still_heard_once(cuts):
    events, _ = listen(cuts)
    assert pcm(events) == pcm(UNFAULTED)
    assert_one_timeline(events)


@pytest.mark.parametrize("cut", CUTS)
def test_opus_resumes_to_the_nearest_packet(cut):
    unfaulted, _ = listen([], "opus")
    events, _ = listen([cut], "opus")
    assert_one_timeline(events, READY | {"format": "opus"})
    frames = [e.frame for e in events if e.frame]
    assert abs(len(frames) - len([e for e in unfaulted if e.frame])) <= 1  # heard within half a packet of where it was cut


def test_flushes_after_the_anchor_are_resent_and_those_answered_not_told_twice():
    progress = Progress(READY)
    for delta in ("One two three. ", "Four five,"):
        progress.sent("text", delta)
    progress.sent("flush")
    progress.sent("text", " six seven. Eight.")
    progress.sent("flush")
    router = Router()
    for message in gateway(0):
        progress.received(router.route(message))
        if progress.anchor.text_start:
            break  # the second sentence's first word heard: the flush after "Four five," is unanswered
    assert progress.resume() == [
        {"type": "text", "text": "Four five,"}, {"type": "flush"}, {"type": "text", "text": " six seven. Eight."},
        {"type": "flush"},
    ]
    progress.received(Event(0, "c", {"type": "flushed", "context_id": "c"}))  # now it is answered
    splice = progress.splice()
    flushed = Event(0, "c", {"type": "flushed", "context_id": "c"})
    assert splice.event(flushed) is None and splice.event(flushed) == flushed


def test_without_the_anchors_timestamps_again_the_frames_before_it_place_the_audio():
    second = next(i for i, m in enumerate(gateway(0)) if isinstance(m, str) and '"Four' in m)
    progress = Progress(READY)
    progress.sent("speak", TEXT)
    router = Router()
    for message in gateway(0)[:second + 4]:
        progress.received(router.route(message))
    splice = progress.splice()
    # The new gateway cut the text otherwise: its first timestamps are not the anchor's sentence.
    other = json.dumps({"type": "timestamps", "context_id": "c", "words": ["Four"], "start_ms": [10], "end_ms": [30],
                        "text_span": [0, 4]})
    router = Router()
    router.route(json.dumps({"type": "audio_start", "context_id": "c", "stream": 1}))
    assert splice.event(router.route(other)) is None  # its words are the anchor's sentence's, told already
    resumed = [splice.event(router.route(v1.audio_frame(1, i, i * FRAME, bytes([i]) * 2 * FRAME, False))) for i in range(5)]
    first = next(e.frame for e in resumed if e is not None)
    skipped = (progress.heard - progress.anchor.frames_before * FRAME) // FRAME  # heard since the anchor's frame
    assert resumed[:skipped] == [None] * skipped and first.payload[0] == skipped
    assert first.seq == progress.frames and first.sample_offset == progress.heard


class FakeSocket:
    """A gateway's socket that says its messages, then closes with `code`."""

    def __init__(self, received: list[str | bytes], code: int = 1000) -> None:
        self.received = list(received)
        self.sent: list[dict] = []
        self.close_code = code

    async def send(self, message: str) -> None:
        self.sent.append(json.loads(message))

    async def close(self) -> None:
        pass

    def __aiter__(self):
        return self

    async def __anext__(self) -> str | bytes:
        await asyncio.sleep(0)
        if not self.received:
            raise websockets.ConnectionClosed(Close(self.close_code, ""), None)
        return self.received.pop(0)


def client_over(sockets: list[FakeSocket], first: FakeSocket, tries: int = 3) -> SpeechClient:
    async def open_(url: str) -> tuple[FakeSocket, dict]:
        if not sockets:
            raise OSError(f"{url}: connection refused")
        return sockets.pop(0), READY

    return SpeechClient(first, READY, Reconnect(["ws://a", "ws://b"], open_, tries=tries, backoff_s=0.001))


def test_the_client_resumes_its_context_on_the_next_gateway_and_keeps_timestamps_it_was_not_asked_for():
    cut = len(gateway(0)) // 2
    second = FakeSocket(gateway(1))  # the anchor is the second sentence here

    async def run():
        client = client_over([second], FakeSocket(gateway(0)[:cut], code=1001))
        context = client.context("c")
        await context.speak(TEXT)
        events = [e async for e in context.events()]
        await client.close()
        return client, context, events

    client, context, events = asyncio.run(run())
    assert client.resumes == 1 and client.reconnect.used == 1 and context.done is not None
    assert pcm(events) == pcm(UNFAULTED) and not any(e.kind == "timestamps" for e in events)
    assert second.sent == [{"type": "text", "text": TEXT[len(SENTENCES[0][0]) + 1:], "context_id": "c"},
                           {"type": "close", "context_id": "c"}]


@pytest.mark.parametrize("code,sockets,error", [(1006, 1, CONNECTION_CLOSED), (1011, 1, CONNECTION_CLOSED),
                                                (1001, 0, RESUME_FAILED)])
def test_another_close_or_no_gateway_to_resume_on_ends_the_context_with_an_error(code, sockets, error):
    async def run():
        client = client_over([FakeSocket(gateway(0)) for _ in range(sockets)], FakeSocket(gateway(0)[:6], code=code))
        context = client.context("c")
        await context.speak(TEXT)
        with pytest.raises(SpeechError) as ended:
            async for _ in context.events():
                pass
        with pytest.raises(SpeechError):
            await client.context().speak("Too late.")  # the client has ended too
        return ended.value.code

    assert asyncio.run(asyncio.wait_for(run(), 5)) == error


def test_a_context_of_a_voice_without_word_timestamps_ends_with_an_error_and_the_others_resume():
    async def run():
        start = json.dumps({"type": "audio_start", "context_id": "ar", "stream": 2, "voice": "ar-voice"})
        client = client_over([FakeSocket(gateway(0))], FakeSocket([start, *gateway(0)[:4]], code=1012))
        piper, ar = client.context("c"), client.context("ar")
        await piper.speak(TEXT)
        await ar.speak("Hello.")
        with pytest.raises(SpeechError) as ended:
            async for _ in ar.events():
                pass
        return [e async for e in piper.events()], ended.value

    events, ended = asyncio.run(run())
    assert ended.code == CONNECTION_CLOSED and "ar-voice" in str(ended)
    assert pcm(events) == pcm(UNFAULTED)

