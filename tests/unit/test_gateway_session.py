"""Protocol v1's rules on the sans-I/O session: no socket, no Triton. Synthesis is
played by handing the session PCM for the jobs it asked for."""

import json

import numpy as np
import pytest

from contract import models as c
from contract.voices import EMBEDDED
from gateway import messages as p
from gateway.conversation.actions import Close, Job, Send, Stop, Synthesize
from gateway.conversation.contexts import AdmitAll, Limits
from gateway.conversation.segmenter import REQUEST_CHARS
from gateway.protocols.session import Session
from speechstream import protocol as v1

RATE = EMBEDDED.sample_rate


class Recorder:
    """The session's observer: what the gateway's metrics would count."""

    def __init__(self):
        self.errors, self.first_audio_s, self.audio_s = [], [], 0.0
        self.chat_turns, self.chat_rounds, self.held_s = [], 0, {True: 0.0, False: 0.0}

    def error(self, code):
        self.errors.append(code)

    def first_audio(self, seconds):
        self.first_audio_s.append(seconds)

    def audio(self, seconds):
        self.audio_s += seconds

    def chat_turn(self, outcome):
        self.chat_turns.append(outcome)

    def chat_round(self):
        self.chat_rounds += 1

    def held_audio(self, seconds, released):
        self.held_s[released] += seconds


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def session(**limits):
    recorder, clock = Recorder(), Clock()
    s = Session(Limits(**limits), recorder, clock, session_id="s1")
    return s, recorder, clock


def messages(actions):
    return [json.loads(a.data) for a in actions if isinstance(a, Send) and isinstance(a.data, str)]


def frames(actions):
    return [v1.parse_audio_frame(a.data) for a in actions if isinstance(a, Send) and isinstance(a.data, bytes)]


def jobs(actions) -> list[Job]:
    return [a.job for a in actions if isinstance(a, Synthesize)]


def send(s, **message):
    return s.receive(json.dumps(message))


def speech(seconds):
    return (0.1 * np.sin(np.arange(round(seconds * RATE)) / 10)).astype(np.float32)


def test_ready_on_start_and_after_config_then_config_is_too_late_once_a_context_opened():
    s, recorder, _ = session()
    (ready,) = messages(s.start())
    assert ready == {"type": "ready", "session_id": "s1", "format": "opus", "sample_rate": 48000, "channels": 1,
                     "frame_ms": 20, "pre_skip": 312, "voices": [c.DEFAULT_VOICE], "without_word_timestamps": []}
    (ready,) = messages(send(s, type="config", format="pcm_s16le", sample_rate=16000, frame_ms=40))
    assert (ready["format"], ready["sample_rate"], ready["frame_ms"], ready["pre_skip"]) == ("pcm_s16le", 16000, 40, 0)
    send(s, type="text", context_id="a", text="Hi")
    (error,) = messages(send(s, type="config"))
    assert error["code"] == v1.CONFIG_TOO_LATE
    assert recorder.errors == [v1.CONFIG_TOO_LATE]


def test_speak_runs_one_job_then_the_last_frame_is_flagged_and_done_gives_the_duration():
    s, recorder, clock = session()
    s.start()
    actions = send(s, type="speak", context_id="a", text="Hello there. How are you?")
    (start,) = messages(actions)
    assert start == {"type": "audio_start", "context_id": "a", "stream": 1, "voice": c.DEFAULT_VOICE, "speaker": 0,
                     "sample_rate": 48000}
    (job,) = jobs(actions)
    assert [x.text for x in job.sentences] == ["Hello there.", "How are you?"]
    assert [(x.start, x.end) for x in job.sentences] == [(0, 12), (13, 25)]
    clock.now += 0.25
    audio = frames(s.audio(job.id, speech(0.5), 0, []))
    assert [f.seq for f in audio] == list(range(len(audio))) and all(f.stream == 1 for f in audio)
    assert [f.sample_offset for f in audio] == [960 * i for i in range(len(audio))]
    assert recorder.first_audio_s == [pytest.approx(0.25)]
    end = s.finished(job.id)
    tail = frames(end)
    assert tail[-1].last and not any(f.last for f in audio + tail[:-1])
    (done,) = messages(end)
    assert done["type"] == "done" and done["audio_ms"] == pytest.approx(500, abs=1)
    assert s.contexts == {} and not s.busy
    assert recorder.audio_s == pytest.approx((len(audio) + len(tail)) * 0.02)


def test_deltas_release_complete_sentences_and_queue_them_behind_the_job_in_flight():
    s, _, _ = session()
    assert jobs(send(s, type="text", context_id="a", text="One.")) == []  # it may go on: "One.5"
    (first,) = jobs(send(s, type="text", context_id="a", text=" Tw"))  # the next sentence began
    assert [x.text for x in first.sentences] == ["One."]
    assert jobs(send(s, type="text", context_id="a", text="o. ")) == []  # one job at a time
    long = "Word " + "word " * 49 + "end. "  # 254 characters and a space: two make more than a request
    assert jobs(send(s, type="text", context_id="a", text=long + long)) == []
    (second,) = jobs(s.finished(first.id))
    assert [x.text for x in second.sentences] == ["Two.", long.strip()]  # batched up to REQUEST_CHARS
    assert sum(len(x.text) for x in second.sentences) <= REQUEST_CHARS
    (third,) = jobs(s.finished(second.id))
    assert third.sentences[0].start == second.sentences[-1].end + 1
    assert jobs(s.finished(third.id)) == [] and "a" in s.contexts  # open until closed


def test_with_first_phrase_a_streamed_context_speaks_its_first_phrase_before_its_sentence_is_whole():
    s, _, _ = session()
    send(s, type="config", first_phrase=True)
    (first,) = jobs(send(s, type="text", context_id="a", text="Well, the capital"))
    assert [x.text for x in first.sentences] == ["Well,"]
    assert jobs(send(s, type="text", context_id="a", text=" is Paris, of course. It")) == []  # one job at a time
    (second,) = jobs(s.finished(first.id))
    assert [x.text for x in second.sentences] == ["the capital is Paris, of course."]
    assert jobs(send(s, type="text", context_id="b", text="Well, the capital")) != []  # each context has its first
    assert jobs(send(session()[0], type="text", context_id="a", text="Well, the capital")) == []  # off by default


def test_flush_waits_for_the_job_in_flight_then_pads_the_partial_frame():
    s, _, _ = session()
    (job,) = jobs(send(s, type="text", context_id="a", text="Hello there. "))
    assert messages(send(s, type="flush", context_id="a")) == []
    s.audio(job.id, speech(0.013), 0, [])  # under one 20 ms frame
    after = s.finished(job.id)
    assert len(frames(after)) == 1 and not frames(after)[0].last
    assert messages(after) == [{"type": "flushed", "context_id": "a"}]
    (job,) = jobs(send(s, type="speak", context_id="b", text="Next."))
    assert job.start_ms == 0  # a context of its own


def test_cancel_stops_the_job_first_and_its_late_audio_is_dropped():
    s, _, _ = session()
    (job,) = jobs(send(s, type="speak", context_id="a", text="Hello there."))
    actions = send(s, type="cancel", context_id="a")
    assert actions[0] == Stop(job.id)
    assert messages(actions) == [{"type": "cancelled", "context_id": "a"}]
    assert not s.is_current(job.id)
    assert s.audio(job.id, speech(0.1), 0, []) == [] and s.finished(job.id) == []
    (again,) = jobs(send(s, type="speak", context_id="a", text="Again."))  # the id is free again
    assert again.id != job.id


@pytest.mark.parametrize("message,code", [
    ({"type": "flush", "context_id": "nope"}, v1.UNKNOWN_CONTEXT),
    ({"type": "speak", "context_id": "a", "text": "Again."}, v1.CONTEXT_EXISTS),
    ({"type": "text", "context_id": "closed", "text": "More."}, v1.CONTEXT_CLOSED),
    ({"type": "close", "context_id": "closed"}, v1.CONTEXT_CLOSED),
    ({"type": "text", "context_id": "a", "text": "x" * 60}, v1.TEXT_TOO_LONG),
    ({"type": "speak", "context_id": "c", "text": "One too many."}, v1.TOO_MANY_CONTEXTS),
    ({"type": "nope"}, v1.UNKNOWN_TYPE),
])
def test_refused_messages_get_their_code_and_change_nothing(message, code):
    s, recorder, _ = session(max_contexts=2, max_text_chars=100)
    send(s, type="text", context_id="a", text="y" * 50)
    send(s, type="speak", context_id="closed", text="Bye.")
    before = {k: (len(v.queue), v.segmenter.pending, v.closed) for k, v in s.contexts.items()}
    (error,) = messages(send(s, **message))
    assert error["type"] == "error" and error["code"] == code
    assert recorder.errors == [code]
    assert {k: (len(v.queue), v.segmenter.pending, v.closed) for k, v in s.contexts.items()} == before


def test_oversized_binary_and_malformed_frames_are_refused():
    s, recorder, _ = session(max_message_bytes=64)
    s.receive(json.dumps({"type": "text", "context_id": "a", "text": "x" * 100}))
    s.receive(b"\x00")
    s.receive("{not json")
    assert recorder.errors == [v1.MESSAGE_TOO_LARGE, v1.BINARY_NOT_ACCEPTED, v1.INVALID_JSON]


def test_a_failed_job_ends_its_context_with_an_error_and_spares_the_others():
    s, _, _ = session()
    (a,) = jobs(send(s, type="speak", context_id="a", text="One."))
    (b,) = jobs(send(s, type="speak", context_id="b", text="Two."))
    (error,) = messages(s.failed(a.id, v1.BACKEND_UNAVAILABLE, "Triton unavailable"))
    assert error == {"type": "error", "context_id": "a", "code": v1.BACKEND_UNAVAILABLE, "message": "Triton unavailable"}
    assert list(s.contexts) == ["b"] and s.is_current(b.id)


def test_a_job_resuming_tells_its_client_where_its_audio_will_go_on_and_its_frames_continue():
    s, recorder, _ = session()
    (job,) = jobs(send(s, type="speak", context_id="a", text="One. Two."))
    before = frames(s.audio(job.id, speech(0.5), 0, []))
    (resuming,) = messages(s.resuming(job.id, v1.BACKEND_UNAVAILABLE, "Triton closed the stream", 10.0))
    assert resuming == {"type": "resuming", "context_id": "a", "code": v1.BACKEND_UNAVAILABLE,
                        "message": "Triton closed the stream", "audio_ms": 500, "within_ms": 10000}
    after = frames(s.audio(job.id, speech(0.5), 1, []))
    assert [f.seq for f in before + after] == list(range(len(before + after)))
    assert after[0].sample_offset == before[-1].sample_offset + 960
    assert s.is_current(job.id) and recorder.errors == []  # not an error: the stream goes on
    assert messages(s.resuming(job.id + 1, v1.BACKEND_UNAVAILABLE, "?", 10.0)) == []  # no such job: nothing


def test_a_contexts_lead_is_its_audio_ahead_of_a_listener_playing_from_its_first_frame():
    s, _, clock = session()
    (job,) = jobs(send(s, type="speak", context_id="a", text="One. Two."))
    (other,) = jobs(send(s, type="speak", context_id="b", text="Three."))
    assert s.leads() == [0.0, 0.0]  # both wait for their first audio: at its deadline
    clock.now += 0.25
    s.audio(job.id, speech(2.0), 0, [])
    clock.now += 0.5
    assert s.leads() == [pytest.approx(1.5, abs=0.03), 0.0]
    s.finished(job.id)
    assert s.leads() == [0.0]  # `a` is done; `b` still waits...
    s.failed(other.id, v1.SYNTHESIS_FAILED, "no")
    assert s.leads() == []  # ...and then speaks nothing at all


def test_idle_closes_only_when_nothing_is_being_spoken():
    s, _, _ = session()
    (job,) = jobs(send(s, type="text", context_id="a", text="Hello there. "))
    assert s.idle(5) == []
    s.finished(job.id)
    actions = s.idle(5)  # the context is open, but has nothing to say
    assert messages(actions)[0]["code"] == v1.IDLE_TIMEOUT and actions[-1] == Close(1000, "idle timeout")


def test_timestamps_are_in_the_contexts_time_and_name_the_sentences_span():
    s, _, _ = session()
    send(s, type="config", timestamps=True)
    (first,) = jobs(send(s, type="text", context_id="a", text="Hi. "))
    s.audio(first.id, speech(1.0), 0, [("Hi", 0, RATE // 2)])
    send(s, type="text", context_id="a", text="Good day. ")
    (second,) = jobs(s.finished(first.id))
    assert second.start_ms == pytest.approx(1000, abs=1)
    (stamps,) = messages(s.audio(second.id, speech(0.5), 0, [("Good", 0, RATE // 4), ("day", RATE // 4, RATE // 2)]))
    assert stamps == {"type": "timestamps", "context_id": "a", "words": ["Good", "day"],
                      "start_ms": [1000, 1250], "end_ms": [1250, 1500], "text_span": [4, 13]}


def test_abort_stops_every_job_in_flight():
    s, _, _ = session()
    (a,) = jobs(send(s, type="speak", context_id="a", text="One."))
    (b,) = jobs(send(s, type="speak", context_id="b", text="Two."))
    assert set(s.abort()) == {Stop(a.id), Stop(b.id)} and s.contexts == {}


class Admission(AdmitAll):
    """The gateway's side of admission, played by the test: `refusal` says what `said`
    holds; the queue has `room` places and logs who waits and who leaves."""

    def __init__(self, refusal=None, room=0):
        self.said, self.room, self.waiting, self.left = refusal, room, [], []

    def refusal(self):
        return self.said

    def wait(self, context_id):
        if len(self.waiting) >= self.room:
            return None
        self.waiting.append(context_id)
        return len(self.waiting)

    def leave(self, context_id):
        self.waiting.remove(context_id)
        self.left.append(context_id)


def busy():
    return p.ProtocolError(v1.SERVER_BUSY, "the server is at capacity; try again shortly", retry_after_ms=2000)


def test_a_context_the_gateway_does_not_admit_gets_its_error_with_a_retry_hint():
    admission = Admission(p.ProtocolError(v1.TOO_MANY_STREAMS, "at most 2 streams at once per client", retry_after_ms=1000))
    s = Session(Limits(), Recorder(), admission=admission)
    (error,) = messages(send(s, type="speak", context_id="a", text="Hello."))
    assert error == {"type": "error", "context_id": "a", "code": v1.TOO_MANY_STREAMS,
                     "message": "at most 2 streams at once per client", "retry_after_ms": 1000}
    assert s.contexts == {}
    admission.said = None
    assert jobs(send(s, type="speak", context_id="a", text="Hello."))


def test_at_capacity_a_client_that_asked_to_queue_waits_its_turn_told_its_position():
    admission = Admission(busy(), room=2)
    s = Session(Limits(), Recorder(), admission=admission)
    send(s, type="config", queue=True)
    assert messages(send(s, type="speak", context_id="a", text="One. Two.")) == [
        {"type": "queued", "context_id": "a", "position": 1}]
    assert messages(send(s, type="text", context_id="b", text="Three.")) == [
        {"type": "queued", "context_id": "b", "position": 2}]
    assert s.streams == 0 and s.busy  # waiting does not count against capacity, nor is it idle
    assert not jobs(send(s, type="flush", context_id="b"))
    assert messages(s.moved("b", 1)) == [{"type": "queued", "context_id": "b", "position": 1}]
    admitted = s.admitted("a")
    assert [m["type"] for m in messages(admitted)] == ["audio_start"] and jobs(admitted)
    assert s.streams == 1 and s.admitted("a") == [] and s.moved("a", 1) == []
    assert messages(send(s, type="cancel", context_id="b")) == [{"type": "cancelled", "context_id": "b"}]
    assert admission.left == ["b"] and admission.waiting == ["a"]  # a's place is the gateway's to drop


def test_a_full_queue_or_a_client_that_did_not_ask_gets_server_busy():
    admission = Admission(busy(), room=1)
    s = Session(Limits(), Recorder(), admission=admission)
    (error,) = messages(send(s, type="speak", context_id="a", text="Hello."))
    assert error["code"] == v1.SERVER_BUSY and admission.waiting == []
    send(s, type="config", queue=True)
    assert messages(send(s, type="speak", context_id="a", text="Hello."))[0]["type"] == "queued"
    (error,) = messages(send(s, type="speak", context_id="b", text="Hello."))
    assert error["code"] == v1.SERVER_BUSY and error["retry_after_ms"] == 2000 and "queue is full" in error["message"]
    assert list(s.contexts) == ["a"]


def test_other_refusals_are_not_queued_and_a_lost_connection_gives_up_its_places():
    admission = Admission(p.ProtocolError(v1.TOO_MANY_STREAMS, "at most 2", retry_after_ms=1000), room=4)
    s = Session(Limits(), Recorder(), admission=admission)
    send(s, type="config", queue=True)
    assert messages(send(s, type="speak", context_id="a", text="Hello."))[0]["code"] == v1.TOO_MANY_STREAMS
    admission.said = busy()
    send(s, type="speak", context_id="a", text="Hello.")
    send(s, type="speak", context_id="b", text="Hello.")
    assert s.abort() == [] and sorted(admission.left) == ["a", "b"]


def test_each_context_may_open_with_its_own_voice_and_parameters_over_the_config():
    s, _, _ = session()
    send(s, type="config", length_scale=1.2, seed=7)
    (plain,) = jobs(send(s, type="speak", context_id="a", text="One."))
    actions = send(s, type="speak", context_id="b", text="Two.", voice="nova", length_scale=0.8, noise_w=0.1)
    (own,) = jobs(actions)
    assert dict(plain.voice_params) == {c.LENGTH_SCALE: 1.2, c.SEED: 7}
    assert dict(own.voice_params) == {c.LENGTH_SCALE: 0.8, c.SEED: 7, c.NOISE_W: 0.1}  # its own over the config's
    assert messages(actions)[0]["voice"] == c.DEFAULT_VOICE  # OpenAI's names speak with the default voice
    send(s, type="text", context_id="t", text="Three", length_scale=2.0)
    (error,) = messages(send(s, type="text", context_id="t", text=" more.", length_scale=1.0))
    assert (error["code"], error["context_id"]) == (v1.INVALID_FIELD, "t") and "when it opens" in error["message"]
    (error,) = messages(send(s, type="speak", context_id="u", text="Hi.", voice="nobody"))
    assert (error["code"], error["context_id"]) == (v1.UNKNOWN_VOICE, "u") and "u" not in s.contexts
    (error,) = messages(send(s, type="speak", context_id="v", text="Hi.", length_scale=9))
    assert (error["code"], error["context_id"]) == (v1.INVALID_FIELD, "v") and "out of range" in error["message"]


def test_an_ssml_speak_pauses_for_its_breaks_and_speaks_each_rate_in_a_job_of_its_own():
    """SSML's breaks are silence in the context's own time (the next sentence's
    timestamps move by them); <prosody rate> divides the length scale of its sentences."""
    s, _, _ = session()
    s.start()
    send(s, type="config", timestamps=True, format="pcm_s16le", sample_rate=48000)
    speak = ('<speak>Hi.<break time="1s"/><prosody rate="x-slow">Good day.</prosody> '
             '<say-as interpret-as="characters">OK</say-as></speak>')
    (first,) = jobs(actions := send(s, type="speak", context_id="a", text=speak, ssml=True))
    assert [x.text for x in first.sentences] == ["Hi."] and c.LENGTH_SCALE not in dict(first.voice_params)
    s.audio(first.id, speech(0.5), 0, [("Hi", 0, RATE // 2)])
    after_break = s.finished(first.id)
    (slow,) = jobs(after_break)
    sent = np.concatenate([np.frombuffer(f.payload, "<i2") for f in frames(after_break)])
    assert slow.start_ms == pytest.approx(1500, abs=1)  # the first sentence's 0.5 s, then the break's 1 s
    assert len(sent) >= 48000 and not sent[-45000:].any()  # the resampler's tail of "Hi.", then silence
    assert [x.text for x in slow.sentences] == ["Good day."]
    assert dict(slow.voice_params)[c.LENGTH_SCALE] == pytest.approx(EMBEDDED.length_scale / 0.5)
    (stamps,) = messages(s.audio(slow.id, speech(1.0), 0, [("Good", 0, RATE // 2), ("day", RATE // 2, RATE)]))
    assert stamps["start_ms"] == [1500, 2000] and stamps["text_span"] == [3, 12]  # in the text read: "Hi.Good day."
    (normal,) = jobs(s.finished(slow.id))
    assert [x.text for x in normal.sentences] == ["O K"] and c.LENGTH_SCALE not in dict(normal.voice_params)
    assert messages(actions)[0]["type"] == "audio_start"


def test_invalid_ssml_is_refused_naming_the_element_and_opens_no_context():
    s, recorder, _ = session()
    s.start()
    actions = send(s, type="speak", context_id="a", text='<speak>Hi <break time="soon"/></speak>', ssml=True)
    (error,) = messages(actions)
    assert error["code"] == v1.INVALID_SSML and '<break time="soon">' in error["message"] and error["context_id"] == "a"
    assert s.contexts == {} and not jobs(actions)
    (job,) = jobs(send(s, type="speak", context_id="a", text="<speak>Fine.</speak>", ssml=True))  # the connection goes on
    assert [x.text for x in job.sentences] == ["Fine."]


def test_an_ssml_phoneme_goes_with_its_sentence_wherever_that_is_in_the_context():
    s, _, _ = session()
    s.start()
    speak = '<speak>Hi.<break time="1s"/>Well. I say <phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phoneme>.</speak>'
    (first,) = jobs(send(s, type="speak", context_id="a", text=speak, ssml=True))
    assert first.sentences[0].phonemes == ()
    s.audio(first.id, speech(0.5), 0, [("Hi", 0, RATE // 2)])
    (job,) = jobs(s.finished(first.id))
    assert [(x.start, x.text, x.phonemes) for x in job.sentences] == [
        (3, "Well.", ()), (9, "I say tomato.", ((6, 12, "təˈmɑːtoʊ"),))]


def test_ssml_is_read_where_the_config_says_so_and_only_on_speak():
    s, _, _ = session()
    s.start()
    send(s, type="config", ssml=True)
    (job,) = jobs(send(s, type="speak", context_id="a", text='<speak><sub alias="Doctor">Dr.</sub> Who.</speak>'))
    assert [x.text for x in job.sentences] == ["Doctor Who."]
    (plain,) = jobs(send(s, type="speak", context_id="b", text="<speak>As text.</speak>", ssml=False))
    assert " ".join(x.text for x in plain.sentences) == "<speak>As text. </speak>"
    (error,) = messages(send(s, type="text", context_id="c", text="<speak>", ssml=True))
    assert error["code"] == v1.INVALID_FIELD
