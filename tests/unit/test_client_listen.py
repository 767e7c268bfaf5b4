"""The client library's listen mode without a server: the events a listening connection
hears, typed and in order (a dictated utterance, a spoken chat turn's reply on its turn id, a
barge-in's late `cancelled`, the connection's errors), beside a context of the client's
own; the microphone's timeline that voice-to-voice latency starts from; and what
speechstream-listen makes of the events (speechstream/client/listen.py's Conversation and output)."""

import asyncio
import json
import time

import numpy as np
import pytest

from speechstream import protocol as v1
from speechstream.client import (
    Event,
    Microphone,
    Router,
    SpeechClient,
    SpeechStarted,
    SpeechStopped,
    SyncSpeechClient,
    Transcript,
)
from speechstream.client.events import heard
from speechstream.client.listen import REPLY_RATE, SETTLE_S, STEP, Conversation, Lines, Pacer
from tests.unit.test_client_routing import READY, FakeSocket, FakeSyncSocket, done, frame, msg, start


class MicrophoneSocket(FakeSocket):
    """Keeps binary messages sent as they are."""

    async def send(self, message: str | bytes) -> None:
        self.sent.append(message if isinstance(message, bytes) else json.loads(message))


SPOKEN_TURN = [
    msg(type="speech_started", turn_id="turn-1", audio_ms=1000),
    msg(type="transcript", turn_id="turn-1", text="What is", final=False),
    msg(type="speech_stopped", turn_id="turn-1", audio_ms=2400),
    msg(type="transcript", turn_id="turn-1", text="What is the capital of France?", final=True),
    start("turn-1", 1),
    msg(type="reply", turn_id="turn-1", outcome="held", rounds=2, draft_tokens=8, accepted_tokens=8),
    msg(type="reply_text", turn_id="turn-1", text="Paris."),
    frame(1, 0), start("c1", 2), frame(2, 0, last=True), done("c1"), frame(1, 1, last=True), done("turn-1"),
    msg(type="error", code=v1.AUDIO_NOT_ACCEPTED, message="a PCM message of 9999 bytes is over 6400"),
    msg(type="speech_started", turn_id="turn-2", audio_ms=5000),
    msg(type="cancelled", context_id="turn-1"),  # barge-in: the reply was all sent, and still playing
]


def described(event):
    """(what, utterance or context, detail) of a heard event."""
    if isinstance(event, (SpeechStarted, SpeechStopped)):
        return type(event).__name__, event.turn_id, event.audio_ms
    if isinstance(event, Transcript):
        return "Transcript", event.turn_id, (event.text, event.final)
    return event.kind or "frame", event.context_id, event.frame.seq if event.frame else None


def test_a_listening_client_hears_its_utterances_typed_and_their_replies_beside_its_own_contexts():
    async def run():
        client = SpeechClient(MicrophoneSocket(SPOKEN_TURN), READY, listen={})
        own = client.context("c1")
        heard = [e async for e in client.heard()]
        return heard, [e.frame.seq if e.frame else e.kind async for e in own.events()], client

    heard, own, client = asyncio.run(run())
    assert [described(e) for e in heard] == [
        ("SpeechStarted", "turn-1", 1000), ("Transcript", "turn-1", ("What is", False)),
        ("SpeechStopped", "turn-1", 2400), ("Transcript", "turn-1", ("What is the capital of France?", True)),
        ("reply", "turn-1", None), ("reply_text", "turn-1", None), ("frame", "turn-1", 0), ("frame", "turn-1", 1),
        ("done", "turn-1", None), ("error", None, None), ("SpeechStarted", "turn-2", 5000),
        ("cancelled", "turn-1", None),
    ]
    assert own == [0, "done"]  # the client's own context is not listen mode's
    assert all(isinstance(e.at, float) for e in heard) and [e["code"] for e in client.errors] == [v1.AUDIO_NOT_ACCEPTED]


def test_without_listen_nothing_is_heard_and_other_contexts_events_are_dropped_as_before():
    async def run():
        client = SpeechClient(MicrophoneSocket(SPOKEN_TURN), READY)
        return [e async for e in client.heard()]

    assert asyncio.run(run()) == []


def test_audio_sent_is_placed_on_the_microphones_timeline():
    async def run():
        ws = MicrophoneSocket([])
        client = SpeechClient(ws, READY, listen={"sample_rate": 48000})
        times = [await client.send_audio(b"\x00" * 1920) for _ in range(3)]  # 20 ms each at 48 kHz
        await client.end_of_speech()
        await client.close()
        return ws.sent, times, client.microphone

    sent, times, microphone = asyncio.run(run())
    assert sent == [b"\x00" * 1920] * 3 + [{"type": "end_of_speech"}]
    assert microphone.ms == pytest.approx(60)
    assert [microphone.sent_at(ms) for ms in (0, 20, 20.5, 60)] == [times[0], times[0], times[1], times[2]]
    assert microphone.sent_at(60.5) is None  # not sent yet


def test_the_microphone_keeps_only_its_last_minutes():
    microphone = Microphone(keep_ms=1000)
    for i in range(400):  # 8 s of 20 ms messages
        microphone.sent(20, at=float(i))
    assert microphone.sent_at(7990) == 399.0 and microphone.sent_at(6500) == 324.0
    assert microphone.sent_at(100) is None  # long gone
    assert len(microphone._ends) <= 150


def test_listen_mode_does_not_resume():
    with pytest.raises(ValueError, match="does not resume"):
        asyncio.run(SpeechClient.connect("ws://127.0.0.1:9/v1/stream", resume=True, listen={}))


def test_the_sync_client_hears_the_same_events():
    class Socket(FakeSyncSocket):
        def send(self, message):
            self.sent.append(message if isinstance(message, bytes) else json.loads(message))

    ws = Socket([msg(**READY), msg(**READY), *SPOKEN_TURN[:6]])
    client = SyncSpeechClient.over(ws, listen={})
    client.send_audio(b"\x00" * 640)  # 20 ms at 16 kHz, the default
    heard = [e for _, e in zip(range(5), client.heard())]
    assert [described(e) for e in heard][3:] == [
        ("Transcript", "turn-1", ("What is the capital of France?", True)), ("reply", "turn-1", None)]
    assert isinstance(heard[-1], Event) and client.microphone.ms == pytest.approx(20)
    assert ws.sent[0]["listen"] == {} and ws.sent[1] == b"\x00" * 640


def conversation_of(chat, messages):
    """A speechstream-listen Conversation fed `messages`, the i-th arriving at i seconds."""
    router, conversation = Router(), Conversation(chat)
    for i, message in enumerate(messages):
        conversation.take(heard(router.route(message, at=float(i))))
    return conversation


def test_dictation_ends_each_utterance_at_its_final_and_settles_after_the_end_of_speech():
    c = conversation_of(False, SPOKEN_TURN[:2])
    assert not c.utterances["turn-1"].ended and not c.settled(since=0, now=100)
    c = conversation_of(False, SPOKEN_TURN[:4])
    assert c.utterances["turn-1"].ended and c.utterances["turn-1"].text == "What is the capital of France?"
    assert not c.settled(since=3.0, now=4.0) and c.settled(since=3.0, now=3.0 + SETTLE_S)


def test_a_chat_turn_is_answered_once_its_reply_is_done_and_heard_whole():
    c = conversation_of(True, SPOKEN_TURN[:4])
    assert not c.utterances["turn-1"].ended  # its reply is to come
    c = conversation_of(True, SPOKEN_TURN[:13])
    utterance = c.utterances["turn-1"]
    assert utterance.ended and (utterance.outcome, utterance.reply_text, utterance.first_audio_at) == ("held", "Paris.", 7.0)
    assert len(utterance.audio) == 16 and utterance.playing_until() == pytest.approx(7.0 + 8 / REPLY_RATE)
    assert not c.answered(since=1, now=100) and not c.answered(since=0, now=7.0) and c.answered(since=0, now=8.0)
    assert c.errors == []


def test_a_final_of_noise_ends_a_chat_turn_without_a_reply():
    c = conversation_of(True, [msg(type="speech_started", turn_id="turn-1", audio_ms=0),
                               msg(type="transcript", turn_id="turn-1", text="", final=True)])
    assert c.utterances["turn-1"].ended and c.answered(since=0, now=2.0)


def test_voice_to_voice_latency_runs_from_the_last_sample_of_speech_sent_to_the_replys_first_audio():
    c = conversation_of(True, SPOKEN_TURN[:13])  # speech stopped at 2400 ms; the first frame came at 7 s
    microphone = Microphone()
    for i in range(200):  # 4 s of 20 ms messages, the one ending at 2400 ms sent at 4.6 s
        microphone.sent(20, at=2.2 + i * 0.02)
    assert c.latency_s(c.utterances["turn-1"], microphone) == pytest.approx(7.0 - 4.58)
    assert c.latency_s(c.utterances["turn-1"], Microphone()) is None  # its speech was never sent from here


def test_errors_of_a_chat_turn_end_it_and_the_connections_are_kept():
    c = conversation_of(True, SPOKEN_TURN[:4] + [
        msg(type="error", context_id="turn-1", code=v1.SERVER_BUSY, message="busy"),
        msg(type="error", code=v1.RECOGNITION_FAILED, message="the speech recognizer failed")])
    assert c.utterances["turn-1"].ended and c.utterances["turn-1"].error == "server_busy: busy"
    assert c.errors == ["recognition_failed: the speech recognizer failed"]


def test_partials_overwrite_one_line_on_a_terminal_and_are_left_out_elsewhere(capsys):
    for tty in (True, False):
        lines = Lines(tty)
        lines.partial("What")
        lines.partial("What is")
        lines.line("What is it?")
    assert capsys.readouterr().out == "\rWhat\x1b[K\rWhat is\x1b[K\rWhat is it?\x1b[K\nWhat is it?\n"


class PacedClient:
    """What Pacer uses of a SpeechClient: its microphone, and a send that keeps when."""

    def __init__(self):
        self.microphone, self.times = Microphone(), []

    async def send_audio(self, audio):
        self.times.append(time.perf_counter())
        self.microphone.sent(len(audio) / 2 / 16, self.times[-1])


def test_the_pacer_sends_in_real_time_or_ahead_and_starts_again_after_a_pause():
    async def run(ahead_s):
        client = PacedClient()
        pacer = Pacer(client, ahead_s)
        await pacer.send(np.zeros(STEP * 10, np.int16))  # 200 ms
        await asyncio.sleep(0.3)  # dictation waits between files
        await pacer.send(np.zeros(STEP * 5, np.int16))
        return [t - client.times[0] for t in client.times]

    real_time, ahead = asyncio.run(run(0.0)), asyncio.run(run(0.1))
    assert 0.17 <= real_time[9] < 0.3 and ahead[4] < 0.03  # the first 100 ms at once when ahead
    assert real_time[14] - real_time[10] >= 0.07  # after the pause, paced again: no burst to catch up
