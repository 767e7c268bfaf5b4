"""OpenAI's Realtime API on the sans-I/O RealtimeSession (gateway/protocols/realtime.py): no
socket, no Triton. The recognizer, the Thinker and synthesis are played by handing the
inner v1 session their events, as protocol v1's listen and chat tests do."""

import base64
import json

import numpy as np
import pydantic
import pytest
from openai.types.realtime import RealtimeServerEvent

from contract import models as c
from contract.voices import EMBEDDED
from gateway.conversation.actions import Hear, Send, Stop, StopThinking, Synthesize, Think
from gateway.conversation.contexts import AdmitAll, Limits
from gateway.messages import DEFAULT_SYSTEM, ProtocolError
from gateway.protocols.realtime import RealtimeSession
from gateway.protocols.session import Session
from speechstream import protocol as v1
from tests.unit.test_gateway_session import Clock, Recorder

VOICE_RATE = EMBEDDED.sample_rate
QUESTION = [(c.SPEECH_STARTED, 1000, ""), (c.PARTIAL, 1500, "What is"), (c.SPEECH_STOPPED, 2400, ""),
            (c.FINAL, 2400, "What is the capital of France?")]


def realtime(beta=False, transcription=False, **update):
    clock = Clock()
    s = RealtimeSession(Session(Limits(), Recorder(), clock, session_id="s1", chat=True, listen=True), beta,
                        transcription_only=transcription)
    (created,) = events(s.start())
    assert created["type"] == "session.created"
    if update:
        assert events(send(s, "session.update", session=update))[0]["type"] == "session.updated"
    return s, clock


def send(s, kind, **fields):
    return s.receive(json.dumps({"type": kind, "event_id": "evt_1", **fields}))


def events(actions):
    return [json.loads(a.data) for a in actions if isinstance(a, Send)]


def kinds(actions):
    return [e["type"] for e in events(actions)]


def errors(actions):
    return [e["error"] for e in events(actions) if e["type"] == "error"]


def pcm24(ms):
    return (np.sin(np.arange(24 * ms) / 7) * 8000).astype("<i2").tobytes()


def append(s, audio: bytes):
    return send(s, "input_audio_buffer.append", audio=base64.b64encode(audio).decode())


def spoken(s, *said, utterance=("r1", 0)):
    """The recognizer's events [(kind, audio_ms, text)] of one utterance, through the session."""
    return [a for kind, ms, text in said for a in s.recognized(kind, utterance, ms, text)]


def answered(s, text="Paris is the capital.", whole=True):
    """A spoken question (speculation's rounds ended at once) answered with `text` and its
    first second of audio: "Paris is the capital."."""
    append(s, pcm24(100))
    out = []
    for said in QUESTION:
        out += spoken(s, said)
        for think in (a for a in out if isinstance(a, Think) and not a.messages[-1]["content"].endswith("?")):
            out += s.thought_done(think.id)
    (think,) = [a for a in out if isinstance(a, Think) and a.messages[-1]["content"].endswith("?")]
    out += s.thought(think.id, [5, 6], text, None) + (s.thought_done(think.id) if whole else [])
    (job,) = [a.job for a in out if isinstance(a, Synthesize)]
    words = [("Paris", 0, 8820), ("is", 8820, 13230), ("the", 13230, 15435), ("capital.", 15435, VOICE_RATE)]
    out += s.audio(job.id, np.zeros(VOICE_RATE, np.float32), 0, words)
    return out, think, job


def test_the_session_is_created_and_updated_in_the_ga_shape():
    s, _ = realtime()
    (updated,) = events(send(s, "session.update", session={
        "type": "realtime", "instructions": "Be brief.", "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 24000}, "transcription": {"model": "whisper-1"},
                      "turn_detection": {"type": "semantic_vad", "eagerness": "high"}},
            "output": {"voice": "alloy", "speed": 1.25}}}))
    session = updated["session"]
    assert session["type"] == "realtime" and session["instructions"] == "Be brief."
    assert session["audio"]["output"]["voice"] == EMBEDDED.name  # OpenAI's names: the server's default voice
    assert session["audio"]["input"]["turn_detection"]["eagerness"] == "high"
    append(s, pcm24(20))  # the first audio fixes the inner v1 session's config
    config = s.inner.config
    assert config.listen.turn_detection == "smart" and config.listen.endpoint_ms == 1000
    assert config.listen.sample_rate == 24000 and config.format == "pcm_s16le" and config.sample_rate == 24000
    assert config.chat.system == "Be brief." and dict(config.voice_params)[c.LENGTH_SCALE] == pytest.approx(0.8)


def test_a_beta_client_gets_the_flat_session_and_may_send_it():
    s, _ = realtime(beta=True)
    (updated,) = events(send(s, "session.update", session={
        "input_audio_format": "g711_ulaw", "turn_detection": {"type": "server_vad", "silence_duration_ms": 800}}))
    session = updated["session"]
    assert session["input_audio_format"] == "g711_ulaw" and session["output_audio_format"] == "pcm16"
    assert session["turn_detection"]["silence_duration_ms"] == 800 and "audio" not in session
    assert s.settings.input.to_pcm(bytes([0x00, 0x80, 0xFF])) == np.array([-32124, 32124, 0], "<i2").tobytes()
    mulaw = bytes([0x00, 0x80] * 400)  # G.711 µ-law, 100 ms at 8 kHz
    hears = [a for _ in range(5) for a in append(s, mulaw) if isinstance(a, Hear)]
    assert s.inner.config.listen.sample_rate == 8000 and s.inner.config.listen.endpoint_ms == 800
    assert 7900 < sum(h.audio.size for h in hears) <= 8000  # 500 ms taken to 16 kHz


def test_a_spoken_turn_is_committed_answered_and_spoken_with_nothing_before_the_final():
    s, _ = realtime(audio={"input": {"transcription": {"model": "whisper-1"}}})
    out = append(s, pcm24(100))
    assert [a for a in out if isinstance(a, Hear)] and not events(out)
    out, think, job = answered(s)
    assert len([a for a in out if isinstance(a, Think)]) == 2  # a speculative round at the partial, unseen
    delta = "conversation.item.input_audio_transcription.delta"
    assert delta in kinds(out)  # the partial "What is", told as it came
    names = [k for k in kinds(out) if k != delta]
    assert names[:8] == ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                         "input_audio_buffer.committed", "conversation.item.added", "conversation.item.done",
                         "conversation.item.input_audio_transcription.completed", "response.created",
                         "response.output_item.added"]
    user = next(e for e in events(out) if e["type"] == "conversation.item.added")["item"]
    assert user["role"] == "user" and user["content"][0]["transcript"] == "What is the capital of France?"
    text = "".join(e["delta"] for e in events(out) if e["type"] == "response.output_audio_transcript.delta")
    assert text == "Paris is the capital."
    done = s.finished(job.id)
    deltas = [e for e in events(out + done) if e["type"] == "response.output_audio.delta"]
    assert sum(len(base64.b64decode(e["delta"])) for e in deltas) == pytest.approx(48000, abs=960)  # 1 s at 24 kHz
    assert [k for k in kinds(done) if k != "response.output_audio.delta"] == ["response.output_audio.done", "response.output_audio_transcript.done",
                           "response.content_part.done", "response.output_item.done", "conversation.item.done",
                           "response.done"]
    response = events(done)[-1]["response"]
    assert response["status"] == "completed" and response["output"][0]["content"][0]["transcript"] == text
    assert think.messages[0] == {"role": "system", "content": DEFAULT_SYSTEM}


def test_partials_that_add_words_are_told_as_transcription_deltas():
    s, _ = realtime(audio={"input": {"transcription": {"model": "whisper-1"}}})
    append(s, pcm24(100))
    said = [(c.SPEECH_STARTED, 0, ""), (c.PARTIAL, 300, "What is"), (c.PARTIAL, 600, "What is the"),
            (c.PARTIAL, 900, "What was the"), (c.PARTIAL, 1200, "What is the capital")]
    deltas = [e["delta"] for e in events(spoken(s, *said))
              if e["type"] == "conversation.item.input_audio_transcription.delta"]
    assert deltas == ["What is", " the", " capital"]  # a revision ("What was") is not told
    s, _ = realtime()  # no transcription asked: no deltas
    append(s, pcm24(100))
    assert "conversation.item.input_audio_transcription.delta" not in kinds(spoken(s, *said))


def test_a_beta_client_hears_the_reply_under_the_beta_names():
    s, _ = realtime(beta=True)
    out, _, job = answered(s)
    names = set(kinds(out + s.finished(job.id)))
    assert {"response.audio.delta", "response.audio_transcript.delta", "conversation.item.created",
            "response.audio.done", "response.done"} <= names
    assert not names & {"response.output_audio.delta", "conversation.item.added", "conversation.item.done"}


def test_create_response_false_waits_for_response_create():
    s, _ = realtime(audio={"input": {"turn_detection": {"type": "server_vad", "create_response": False}}})
    append(s, pcm24(100))
    out = spoken(s, *QUESTION)
    assert not [a for a in out if isinstance(a, Think)] and "response.created" not in kinds(out)
    asked = send(s, "response.create")
    assert kinds(asked)[0] == "response.created"
    (think,) = [a for a in asked if isinstance(a, Think)]
    assert think.messages[-1]["content"] == "What is the capital of France?"


def test_a_text_item_is_answered_by_response_create():
    s, _ = realtime()
    added = send(s, "conversation.item.create", item={
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello there."}]})
    assert kinds(added) == ["conversation.item.added", "conversation.item.done"]
    item_id = events(added)[0]["item"]["id"]
    assert events(send(s, "conversation.item.retrieve", item_id=item_id))[0]["item"]["id"] == item_id
    (think,) = [a for a in send(s, "response.create", response={}) if isinstance(a, Think)]
    assert think.messages[-1]["content"] == "Hello there."
    empty = events(send(s, "response.create"))  # nothing new to answer: an empty response, not an error
    assert [e["type"] for e in empty] == ["response.created", "response.done"]
    assert empty[-1]["response"]["status"] == "completed" and empty[-1]["response"]["output"] == []


def test_barge_in_cancels_the_response_and_truncate_keeps_the_words_heard():
    s, clock = realtime()
    out, think, job = answered(s, text="Paris is the capital. It", whole=False)
    item_id = next(e for e in events(out) if e["type"] == "response.output_item.added")["item"]["id"]
    clock.now += 2
    barge = spoken(s, (c.SPEECH_STARTED, 5000, ""), utterance=("r1", 1))
    assert StopThinking(think.id) in barge and Stop(job.id) in barge
    done = events(barge)[-1]
    assert done["type"] == "response.done" and done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "turn_detected"
    truncated = send(s, "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=650)
    assert kinds(truncated) == ["conversation.item.truncated"]
    assert s.inner.history[-1] == {"role": "assistant", "content": "Paris is"}
    assert errors(send(s, "conversation.item.truncate", item_id=item_id, audio_end_ms=9000))[0]["param"] == "audio_end_ms"


def test_response_cancel_ends_the_response_in_progress():
    s, _ = realtime()
    out, think, job = answered(s, text="Paris is the capital. It", whole=False)
    cancelled = send(s, "response.cancel")
    assert StopThinking(think.id) in cancelled
    assert events(cancelled)[-1]["response"]["status"] == "cancelled"
    assert events(cancelled)[-1]["response"]["status_details"]["reason"] == "client_cancelled"
    assert errors(send(s, "response.cancel"))[0]["code"] == "response_cancel_not_active"


def test_clear_drops_the_turn_being_spoken():
    s, _ = realtime()
    append(s, pcm24(100))
    spoken(s, *QUESTION[:2])
    assert kinds(send(s, "input_audio_buffer.clear")) == ["input_audio_buffer.cleared"]
    out = spoken(s, *QUESTION[2:])
    assert "conversation.item.added" not in kinds(out) and "response.created" not in kinds(out)
    assert s.inner.chatting.ids == set()


def test_a_transcription_session_transcribes_and_never_answers():
    s, _ = realtime(transcription=True, audio={"input": {"transcription": {"model": "whisper-1"}}})
    append(s, pcm24(100))
    out = spoken(s, *QUESTION)
    assert not [a for a in out if isinstance(a, Think)] and "response.created" not in kinds(out)
    (completed,) = [e for e in events(out) if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert completed["transcript"] == "What is the capital of France?"
    assert errors(send(s, "response.create"))[0]["param"] == "type"


@pytest.mark.parametrize("frame, param", [
    ("{not json", None),
    (json.dumps({"type": "session.dance"}), "type"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}), "audio"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm24(3000)).decode()}), "audio"),
    (json.dumps({"type": "session.update", "session": {"tools": [{"type": "function", "name": "f"}]}}), "session.tools"),
    (json.dumps({"type": "session.update", "session": {"output_modalities": ["text"]}}), "session.output_modalities"),
    (json.dumps({"type": "session.update", "session": {"audio": {"input": {"transcription": {"language": "fr"}}}}}),
     "session.audio.input.transcription.language"),
    (json.dumps({"type": "session.update", "session": {"audio": {"output": {"voice": "nobody"}}}}),
     "session.audio.output.voice"),
    (json.dumps({"type": "session.update", "session": {"wings": 2}}), "session.wings"),
    (json.dumps({"type": "conversation.item.create", "item": {"type": "function_call", "name": "f"}}), "item.type"),
    (json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_audio", "audio": "AAAA"}]}}), "item.content"),
    (json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": "data:"}]}}), "item.content"),
    (json.dumps({"type": "response.create", "response": {"conversation": "none"}}), "response.conversation"),
    (b"\x00\x01", None),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "A" * 300_000}), None),  # over max_message_bytes
])
def test_hostile_input_gets_an_error_naming_the_field_and_the_session_goes_on(frame, param):
    s, _ = realtime()
    (error,) = errors(s.receive(frame))
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"
    assert [a for a in append(s, pcm24(100)) if isinstance(a, Hear)]  # the session still listens


def test_the_formats_and_turn_detection_are_fixed_once_audio_began():
    s, _ = realtime()
    append(s, pcm24(20))
    (error,) = errors(send(s, "session.update", session={"audio": {"input": {"turn_detection": None}}}))
    assert error["param"] == "session"
    send(s, "session.update", session={"instructions": "Answer in French."})
    assert s.inner.config.chat.system == "Answer in French."  # instructions apply from the next reply


def test_a_reply_drafted_whole_before_the_final_is_a_response_too():
    """Speculation's round over the whole question ended before the final, its first
    phrase spoken ahead (held): at the final the inner session's reply is decided at once,
    and the response begins with the held audio."""
    s, _ = realtime()
    append(s, pcm24(100))
    question = QUESTION[-1][2]
    out = spoken(s, (c.SPEECH_STARTED, 1000, ""), (c.PARTIAL, 2000, question))
    (round_,) = [a for a in out if isinstance(a, Think)]
    s.thought(round_.id, [5, 6], "Paris.", None)
    (job,) = [a.job for a in s.thought_done(round_.id) if isinstance(a, Synthesize)]
    held = s.audio(job.id, np.zeros(VOICE_RATE // 2, np.float32), 0, [("Paris.", 0, VOICE_RATE // 2)])
    assert not events(held) + events(s.finished(job.id))  # nothing before the final
    final = spoken(s, (c.SPEECH_STOPPED, 2400, ""), (c.FINAL, 2400, question))
    names = kinds(final)
    assert names.index("response.created") < names.index("response.output_audio.delta") < names.index("response.done")
    assert s.inner.chatting.ids == set()


class Busy(AdmitAll):
    """The gateway at capacity: every new stream refused."""

    def refusal(self):
        return ProtocolError(v1.SERVER_BUSY, "the servers are busy", retry_after_ms=500)


def test_a_reply_refused_at_capacity_fails_its_response_and_the_session_goes_on():
    """A Realtime session is admitted as a v1 listener is: its reply is a stream, refused
    when the servers are full (the response fails, with the reason), and the next turn
    may be admitted."""
    inner = Session(Limits(), Recorder(), Clock(), session_id="s1", chat=True, listen=True, admission=Busy())
    s = RealtimeSession(inner)
    s.start()
    append(s, pcm24(100))
    out = spoken(s, *QUESTION)
    done = [e for e in events(out) if e["type"] == "response.done"]
    assert done and done[0]["response"]["status"] == "failed"
    assert done[0]["response"]["status_details"]["error"]["code"] == v1.SERVER_BUSY
    assert errors(out)[0]["type"] == "server_error" and errors(out)[0]["code"] == v1.SERVER_BUSY
    assert not [a for a in out if isinstance(a, Synthesize)]
    assert [a for a in append(s, pcm24(100)) if isinstance(a, Hear)]


def test_every_ga_event_is_valid_against_openais_own_types():
    """The SDKs validate what they read (the Agents SDK drops an event that fails): every
    event of a turn, a barge-in, a truncate, a cancel, items and errors, by openai's models."""
    s, clock = realtime(audio={"input": {"transcription": {"model": "whisper-1"}}})
    out, think, job = answered(s, text="Paris is the capital. It", whole=False)
    item_id = next(e for e in events(out) if e["type"] == "response.output_item.added")["item"]["id"]
    clock.now += 2
    out += spoken(s, (c.SPEECH_STARTED, 5000, ""), utterance=("r1", 1))
    out += send(s, "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=650)
    out += send(s, "conversation.item.create", item={
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]})
    out += send(s, "response.create") + send(s, "response.cancel") + send(s, "response.cancel")
    out += send(s, "conversation.item.retrieve", item_id=item_id) + send(s, "input_audio_buffer.clear")
    out += send(s, "session.update", session={"instructions": "Be brief."}) + s.receive("{nope")
    adapter = pydantic.TypeAdapter(RealtimeServerEvent)
    for event in events(out):
        adapter.validate_python(event)
    assert {"response.done", "conversation.item.truncated", "error", "session.updated"} <= set(kinds(out))
