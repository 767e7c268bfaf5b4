"""The client library (client/) without a server: the router on scripted messages, and the clients
over fake sockets that replay them."""

import asyncio
import json

import pytest

from speechstream import protocol as v1
from speechstream.client import Router, SpeechClient, SpeechError, SyncSpeechClient, audio_end_s
from tests.recorder import Recorder

READY = {"type": "ready", "session_id": "s", "format": "opus", "sample_rate": 48000, "channels": 1, "frame_ms": 20, "voices": []}


def msg(**fields) -> str:
    return json.dumps(fields)


def frame(stream: int, seq: int, last: bool = False) -> bytes:
    return v1.audio_frame(stream, seq, seq * 960, b"\x00" * 8, last)


def start(context_id: str, stream: int) -> str:
    return msg(type="audio_start", context_id=context_id, stream=stream)


def done(context_id: str) -> str:
    return msg(type="done", context_id=context_id, audio_ms=40)


def test_frames_go_to_the_context_their_stream_started_for():
    router = Router()
    events = [router.route(m, at=i) for i, m in enumerate(
        [start("a", 1), start("b", 2), frame(2, 0), frame(1, 0), frame(1, 1, last=True), done("a"), frame(9, 0)]
    )]
    assert [e.context_id for e in events] == ["a", "b", "b", "a", "a", "a", None]
    assert [e.at for e in events] == list(range(7))
    assert events[4].frame.last and events[4].kind is None
    assert events[5].ends and not any(e.ends for e in events[:5])


def test_done_and_cancelled_forget_the_stream_and_a_reused_number_maps_anew():
    router = Router()
    router.route(start("a", 1))
    router.route(done("a"))
    assert router.route(frame(1, 0)).context_id is None
    router.route(start("b", 1))
    router.route(msg(type="cancelled", context_id="b"))
    assert router.route(frame(1, 1)).context_id is None
    router.route(start("c", 1))
    assert router.route(frame(1, 0)).context_id == "c"


def test_an_error_ends_its_context_for_a_client_but_its_frames_still_route():
    # context_closed refuses one message; the context's audio goes on to its `done`.
    router = Router()
    router.route(start("a", 3))
    error = router.route(msg(type="error", context_id="a", code=v1.CONTEXT_CLOSED, message="closed"))
    assert error.ends and error.context_id == "a"
    assert router.route(frame(3, 0)).context_id == "a"
    unnamed = router.route(msg(type="error", code=v1.INVALID_JSON, message="bad"))
    assert unnamed.context_id is None and not unnamed.ends


def test_arrival_time_defaults_to_perf_counter():
    import time

    before = time.perf_counter()
    at = Router().route(msg(**READY)).at
    assert before <= at <= time.perf_counter()


@pytest.mark.parametrize("message", [b"\x01\x00", v1.audio_frame(1, 0, 0, b"", False).replace(b"\x01", b"\x02", 1),
                                     "[]", "{}", '{"type": 5}', "{not json"])
def test_a_message_that_is_not_protocol_v1_raises_value_error(message):
    with pytest.raises(ValueError):
        Router().route(message)


def test_audio_end_counts_frame_ms_for_opus_and_the_payload_for_pcm():
    f = v1.AudioFrame(1, 2, 1920, False, b"\x00" * 640)
    assert audio_end_s(f, READY) == pytest.approx((1920 + 960) / 48000)
    assert audio_end_s(f, READY | {"format": "pcm_s16le", "sample_rate": 16000}) == pytest.approx((1920 + 320) / 16000)


class FakeSocket:
    """Replays scripted messages and keeps what is sent; async like websockets' own."""

    def __init__(self, received: list[str | bytes]) -> None:
        self.received = list(received)
        self.sent: list[dict] = []
        self.closed = False

    async def recv(self) -> str | bytes:
        return self.received.pop(0)

    async def send(self, message: str) -> None:
        self.sent.append(json.loads(message))

    async def close(self) -> None:
        self.closed = True

    def __aiter__(self):
        return self

    async def __anext__(self) -> str | bytes:
        if not self.received:
            raise StopAsyncIteration  # the connection closed
        await asyncio.sleep(0)  # as a socket would, let others run between messages
        return self.received.pop(0)


class FakeSyncSocket(FakeSocket):
    def recv(self) -> str | bytes:
        return self.received.pop(0)

    def send(self, message: str) -> None:
        self.sent.append(json.loads(message))

    def close(self) -> None:
        self.closed = True


def test_speech_client_routes_interleaved_contexts_and_raises_the_one_that_failed():
    ws = FakeSocket([
        start("a", 1), start("b", 2), frame(1, 0), frame(2, 0),
        msg(type="timestamps", context_id="a", words=["Hi"], start_ms=[0], end_ms=[10], text_span=[0, 3]),
        msg(type="error", context_id="b", code=v1.SYNTHESIS_FAILED, message="no"), frame(1, 1, last=True),
        done("a"), msg(type="error", code=v1.INVALID_JSON, message="bad"),
    ])

    async def run():
        client = SpeechClient(ws, READY)
        a, b = client.context("a"), client.context("b")
        assert await a.speak("Hi.") > 0
        events = [e async for e in a.events()]
        with pytest.raises(SpeechError) as failed:
            async for _ in b.frames():
                pass
        await client.close()
        return client, a, events, failed.value.code

    client, a, events, code = asyncio.run(run())
    assert [e.frame.seq if e.frame else e.kind for e in events] == [0, "timestamps", 1, "done"]
    assert all(x.at <= y.at for x, y in zip(events, events[1:]))
    assert a.done["audio_ms"] == 40 and code == v1.SYNTHESIS_FAILED
    assert ws.sent == [{"type": "speak", "context_id": "a", "text": "Hi."}]
    assert [e["code"] for e in client.errors] == [v1.INVALID_JSON] and ws.closed


def test_a_context_ends_quietly_when_the_connection_does():
    async def run():
        client = SpeechClient(FakeSocket([start("c1", 1), frame(1, 0)]), READY)
        context = client.context()
        messages = [m async for m in context.messages()]
        return messages, context.done

    messages, done_message = asyncio.run(run())
    assert [m.seq for m in messages] == [0] and done_message is None


def test_sync_client_skips_an_abandoned_context_and_times_its_utterance():
    ws = FakeSyncSocket([
        msg(**READY), msg(**READY | {"format": "pcm_s16le"}),
        start("c1", 1), frame(1, 0), start("c2", 2), frame(1, 1), frame(2, 0), frame(2, 1, last=True), done("c2"),
        start("c3", 3), msg(type="error", context_id="c3", code=v1.TEXT_TOO_LONG, message="long"),
    ])
    client = SyncSpeechClient.over(ws, format="pcm_s16le")
    assert client.ready["format"] == "pcm_s16le"
    next(client.speak("First, dropped after one frame."))
    events = list(client.events("Second."))
    assert [e.frame.seq if e.frame else e.kind for e in events] == [0, 1, "done"]
    assert client.sent <= events[0].at and client.done["context_id"] == "c2"
    with pytest.raises(SpeechError) as refused:
        list(client.speak("x" * 30_000))
    assert refused.value.code == v1.TEXT_TOO_LONG and client.done is None
    assert [m["type"] for m in ws.sent] == ["config", "speak", "speak", "speak"]


def test_sync_client_closes_the_socket_when_the_config_is_refused():
    ws = FakeSyncSocket([msg(**READY), msg(type="error", code=v1.UNKNOWN_VOICE, message="nobody")])
    with pytest.raises(SpeechError) as refused:
        SyncSpeechClient.over(ws, voice="nobody")
    assert refused.value.code == v1.UNKNOWN_VOICE and ws.closed


def test_recorder_keeps_every_event_and_reads_until_asked():
    ws = FakeSocket([
        msg(**READY), start("a", 1), frame(1, 0), msg(type="flushed", context_id="a"), frame(1, 1, last=True),
        frame(7, 0), done("a"),
    ])

    async def run():
        recorder = Recorder(ws)
        ready = await recorder.until("ready")
        sent = await recorder.send(type="speak", context_id="a", text="Hi.")
        flushed = await recorder.until("flushed", "a")
        assert len(recorder.audio("a")) == 1 and ws.received  # nothing read past `flushed`
        await recorder.until("done", "a")
        return recorder, ready, sent, flushed

    recorder, ready, sent, flushed = asyncio.run(run())
    assert ready["type"] == "ready" and flushed == {"type": "flushed", "context_id": "a"}
    assert [f.seq for f in recorder.audio("a")] == [0, 1] and recorder.frames("a")[0].at >= sent
    assert [f.stream for f in recorder.audio(None)] == [7]  # a frame of no known stream
    assert [m["type"] for m in recorder.messages()] == ["ready", "audio_start", "flushed", "done"]
    assert recorder.messages("done") == [json.loads(done("a"))]
    assert len(recorder.events) == 7
