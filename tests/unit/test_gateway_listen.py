"""Protocol v1's listen mode on the sans-I/O session (gateway/conversation/listening.py and the
session's spoken turns): no socket, no recognizer, no Triton. The recognizer is played
by handing the session its events, the Thinker and the synthesis as in chat mode's tests."""

import json

import numpy as np
import opuslib
import pytest

from contract import models as c
from gateway.conversation.actions import Hear, Stop, StopThinking, Synthesize, Think
from gateway.conversation.audio import MicrophoneDecoder
from gateway.conversation.contexts import Limits
from gateway.protocols.session import Session
from speechstream import protocol as v1
from tests.unit.test_gateway_session import Clock, Recorder, messages

VOICE_RATE = 22050


def listening(chat=None, listen=None, server_chat=True):
    clock = Clock()
    s = Session(Limits(), Recorder(), clock, session_id="s1", chat=server_chat, listen=True)
    config = {"type": "config", "format": "pcm_s16le", "listen": listen or {}} | ({"chat": chat} if chat else {})
    assert messages(s.receive(json.dumps(config)))[0]["type"] == "ready"
    return s, clock


def pcm(ms, rate=16000):
    return (np.sin(np.arange(rate * ms // 1000) / 7) * 8000).astype("<i2").tobytes()


def heard(actions):
    return [a for a in actions if isinstance(a, Hear)]


def errors(actions):
    return [m["code"] for m in messages(actions) if m["type"] == "error"]


def test_binary_messages_without_listen_are_refused_and_the_connection_goes_on():
    s = Session(Limits(), Recorder(), Clock(), session_id="s1", listen=True)
    assert errors(s.receive(pcm(20))) == [v1.BINARY_NOT_ACCEPTED]
    assert messages(s.receive(json.dumps({"type": "config", "listen": {}})))[0]["type"] == "ready"


def test_listen_on_a_server_without_a_recognizer_is_unavailable():
    s = Session(Limits(), Recorder(), Clock(), session_id="s1")
    assert errors(s.receive(json.dumps({"type": "config", "listen": {}}))) == [v1.LISTEN_UNAVAILABLE]
    assert errors(s.receive(pcm(20))) == [v1.BINARY_NOT_ACCEPTED]


@pytest.mark.parametrize("listen, code", [
    ({"format": "mp3"}, v1.UNSUPPORTED_FORMAT),
    ({"sample_rate": 44100}, v1.INVALID_FIELD),
    ({"format": "opus", "sample_rate": 16000}, v1.INVALID_FIELD),
    ({"endpoint_ms": 10}, v1.INVALID_FIELD),
    ({"barge_in": "yes"}, v1.INVALID_FIELD),
    ({"turn_detection": "semantic"}, v1.INVALID_FIELD),
    ({"turn_detection": True}, v1.INVALID_FIELD),
    ({"vad": True}, v1.INVALID_FIELD),
])
def test_a_bad_listen_config_is_refused(listen, code):
    s = Session(Limits(), Recorder(), Clock(), session_id="s1", listen=True)
    assert errors(s.receive(json.dumps({"type": "config", "listen": listen}))) == [code]


def test_pcm_is_resampled_to_the_recognizers_rate_and_placed_on_the_timeline():
    s, clock = listening(listen={"sample_rate": 48000})
    hears = []
    for _ in range(10):
        hears += heard(s.receive(pcm(100, 48000)))
        clock.now += 0.1
    assert [h.at_ms for h in hears] == pytest.approx([100 * i for i in range(10)])
    assert 0 <= c.ASR_SAMPLE_RATE - sum(h.audio.size for h in hears) < 400  # 1 s, less the resampler's delay


def test_opus_packets_are_decoded_at_the_recognizers_rate():
    s, _ = listening(listen={"format": "opus"})
    packet = opuslib.Encoder(48000, 1, opuslib.APPLICATION_VOIP).encode(pcm(20, 48000), 960)
    (hear,) = heard(s.receive(packet))
    assert hear.audio.size == 320 and hear.audio.dtype == np.int16
    assert errors(s.receive(b"\xff\xfe\xfd")) == [v1.AUDIO_NOT_ACCEPTED]


@pytest.mark.parametrize("message", [b"\x01", pcm(260)])
def test_audio_that_breaks_the_formats_rules_is_dropped_with_an_error_and_listening_goes_on(message):
    s, _ = listening()
    actions = s.receive(message)
    assert errors(actions) == [v1.AUDIO_NOT_ACCEPTED] and not heard(actions)
    assert len(heard(s.receive(pcm(20)))) == 1


def test_a_flood_of_audio_is_refused_once_then_dropped_until_it_is_back_in_real_time():
    s, clock = listening()
    floods = [s.receive(pcm(200)) for _ in range(20)]  # 4 s at once
    assert sum(len(heard(a)) for a in floods) == 11  # 2 s ahead of the clock, then no more
    assert [e for a in floods for e in errors(a)] == [v1.AUDIO_NOT_ACCEPTED]
    clock.now += 3
    assert len(heard(s.receive(pcm(200)))) == 1


def test_end_of_speech_ends_the_turn_now_and_needs_listen_mode():
    s = Session(Limits(), Recorder(), Clock(), session_id="s1", listen=True)
    assert errors(s.receive(json.dumps({"type": "end_of_speech"}))) == [v1.INVALID_MESSAGE]
    s, _ = listening()
    assert s.receive(json.dumps({"type": "end_of_speech"})) == [Hear(end=True)]


def test_the_config_cannot_change_once_listening():
    s, _ = listening()
    s.receive(pcm(20))
    assert errors(s.receive(json.dumps({"type": "config"}))) == [v1.CONFIG_TOO_LATE]


def events(s, *spoken, utterance=("r1", 0)):
    """The recognizer's events [(kind, audio_ms, text)] of one utterance, through the session."""
    return [a for kind, ms, text in spoken for a in s.recognized(kind, utterance, ms, text)]


QUESTION = [(c.SPEECH_STARTED, 1000, ""), (c.PARTIAL, 1500, "What is"), (c.PARTIAL, 2000, "What is the capital"),
            (c.SPEECH_STOPPED, 2400, ""), (c.FINAL, 2400, "What is the capital of France?")]


def test_dictation_turns_the_recognizers_events_into_the_protocols_messages():
    s, _ = listening()
    out = events(s, *QUESTION)
    assert messages(out) == [
        {"type": "speech_started", "turn_id": "turn-1", "audio_ms": 1000},
        {"type": "transcript", "turn_id": "turn-1", "text": "What is", "final": False},
        {"type": "transcript", "turn_id": "turn-1", "text": "What is the capital", "final": False},
        {"type": "speech_stopped", "turn_id": "turn-1", "audio_ms": 2400},
        {"type": "transcript", "turn_id": "turn-1", "text": "What is the capital of France?", "final": True},
    ]
    assert not [a for a in out if isinstance(a, Think)]  # listen without chat: transcripts only
    assert messages(events(s, (c.SPEECH_STARTED, 5000, ""), utterance=("r1", 1)))[0]["turn_id"] == "turn-2"


def test_a_spoken_turn_is_a_chat_turn_its_partials_drive_speculation_and_its_final_the_reply():
    s, _ = listening(chat={"speculation": "greedy"})
    out = events(s, *QUESTION[:2])
    (round_,) = [a for a in out if isinstance(a, Think)]
    assert round_.turn_id == "turn-1" and round_.messages[-1]["content"] == "What is"
    assert not [m for m in messages(out) if m["type"] in ("reply", "audio_start")]  # nothing before the final
    s.thought_done(round_.id)
    final = events(s, *QUESTION[2:])
    assert [m["type"] for m in messages(final)].count("audio_start") == 1  # the reply's context opens at the final
    assert [a for a in final if isinstance(a, Think)][-1].messages[-1]["content"] == "What is the capital of France?"


def test_a_final_of_noise_ends_the_turn_without_a_reply_or_an_error():
    s, _ = listening(chat={"speculation": "greedy"})
    out = events(s, (c.SPEECH_STARTED, 0, ""), (c.PARTIAL, 300, "Hm"), (c.SPEECH_STOPPED, 600, ""), (c.FINAL, 600, ""))
    round_ = [a for a in out if isinstance(a, Think)][0]
    assert StopThinking(round_.id) in out and not errors(out) and s.chatting.ids == set()


def spoken_reply(s, clock, text="Paris is the capital. It", whole=False):
    """A spoken question answered (speculation off; `whole`: the reply written whole) and
    its first sentence's audio sent, 1 s of it: "Paris is the capital."."""
    final = events(s, (c.SPEECH_STARTED, 0, ""), (c.SPEECH_STOPPED, 900, ""), (c.FINAL, 900, "Capital of France?"))
    (think,) = [a for a in final if isinstance(a, Think)]
    written = s.thought(think.id, [5, 6], text, None) + (s.thought_done(think.id) if whole else [])
    (job,) = [a.job for a in written if isinstance(a, Synthesize)]
    words = [("Paris", 0, 8820), ("is", 8820, 13230), ("the", 13230, 15435), ("capital.", 15435, VOICE_RATE)]
    s.audio(job.id, np.zeros(VOICE_RATE, np.float32), 0, words)
    return think, job


def test_barge_in_cancels_the_reply_being_spoken_and_keeps_only_the_words_heard():
    s, clock = listening(chat={"speculation": "off"})
    think, job = spoken_reply(s, clock)
    clock.now += 0.65  # the listener has heard "Paris is" (to 600 ms) and part of "the"
    out = events(s, (c.SPEECH_STARTED, 2000, ""), utterance=("r1", 1))
    assert StopThinking(think.id) in out and Stop(job.id) in out
    assert [m["type"] for m in messages(out)] == ["speech_started", "cancelled"]
    assert s.history == [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris is"}]


def test_barge_in_stops_a_reply_whose_audio_was_all_sent_but_is_still_playing():
    s, clock = listening(chat={"speculation": "off"})
    think, job = spoken_reply(s, clock, text="Paris is the capital.", whole=True)
    done = s.finished(job.id)
    assert "done" in [m["type"] for m in messages(done)]
    clock.now += 0.7
    out = events(s, (c.SPEECH_STARTED, 2000, ""), utterance=("r1", 1))
    assert messages(out)[-1] == {"type": "cancelled", "context_id": "turn-1"}
    assert s.history[-1] == {"role": "assistant", "content": "Paris is the"}


def test_a_reply_heard_whole_is_left_as_it_was_and_barge_in_can_be_off():
    s, clock = listening(chat={"speculation": "off"})
    think, job = spoken_reply(s, clock, text="Paris is the capital.", whole=True)
    s.finished(job.id)
    clock.now += 5
    assert [m["type"] for m in messages(events(s, (c.SPEECH_STARTED, 9000, ""), utterance=("r1", 1)))] == ["speech_started"]
    assert s.history[-1] == {"role": "assistant", "content": "Paris is the capital."}
    s, clock = listening(chat={"speculation": "off"}, listen={"barge_in": False})
    think, job = spoken_reply(s, clock)
    out = events(s, (c.SPEECH_STARTED, 2000, ""), utterance=("r1", 1))
    assert [m["type"] for m in messages(out)] == ["speech_started"] and not [a for a in out if isinstance(a, Stop)]


def test_with_reply_false_utterances_are_transcribed_and_the_client_asks():
    s, _ = listening(chat={"speculation": "greedy"}, listen={"reply": False})
    out = events(s, *QUESTION)
    assert not [a for a in out if isinstance(a, Think)] and s.chatting.ids == set()
    assert messages(out)[-1] == {"type": "transcript", "turn_id": "turn-1", "text": "What is the capital of France?",
                                 "final": True}
    asked = s.receive(json.dumps({"type": "user", "turn_id": "q1", "text": "What is the capital of France?",
                                  "final": True}))
    assert [a for a in asked if isinstance(a, Think)][0].messages[-1]["content"] == "What is the capital of France?"


@pytest.mark.parametrize("rate", [48000, 44100, 24000, 8000])
def test_the_microphones_resampler_holds_back_at_most_2_ms_of_the_speechs_end(rate):
    """What the resampler keeps is heard a message later: the turn's end waits for it."""
    decoder = MicrophoneDecoder("pcm_s16le", rate, c.ASR_SAMPLE_RATE, v1.LISTEN_MAX_MESSAGE_MS)
    out = sum(decoder.decode(pcm(20, rate)).size for _ in range(50))  # 1 s
    assert 0 <= c.ASR_SAMPLE_RATE - out <= c.ASR_SAMPLE_RATE * 2 // 1000


@pytest.mark.parametrize("hz, kept", [(1000, (0.98, 1.02)), (6000, (0.9, 1.02)), (10000, (0, 0.02))])
def test_the_microphones_resampler_keeps_the_speech_band_and_folds_nothing_into_it(hz, kept):
    decoder = MicrophoneDecoder("pcm_s16le", 24000, c.ASR_SAMPLE_RATE, v1.LISTEN_MAX_MESSAGE_MS)
    tone = (np.sin(2 * np.pi * hz * np.arange(24000) / 24000) * 16000).astype(np.int16)
    out = np.concatenate([decoder.decode(tone[i:i + 480].tobytes()) for i in range(0, tone.size, 480)])
    rms = np.sqrt(np.mean(out[1600:-1600].astype(np.float64) ** 2)) / (16000 / np.sqrt(2))
    assert kept[0] <= rms <= kept[1]
