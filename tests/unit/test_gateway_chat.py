"""Protocol v1's chat mode on the sans-I/O session and its pure rules (gateway/conversation/speculation.py):
no socket, no Thinker, no Triton. The Thinker is played by handing the session the
pieces of the requests it asked for, the synthesis by handing it PCM."""

import json

import numpy as np
import pytest

from gateway.conversation import repetition
from gateway.conversation import speculation as ch
from gateway.conversation.actions import Stop, StopThinking, Synthesize, Think
from gateway.conversation.contexts import AdmitAll, Limits
from gateway.messages import DEFAULT_SYSTEM, Speculation, parse_chat
from gateway.protocols.session import Session
from speechstream import protocol as v1
from tests.unit.test_gateway_session import Clock, Recorder, frames, messages

END = 2  # the chat model's end token in these tests


class Busy(AdmitAll):
    """An admission that refuses every new stream."""

    def refusal(self):
        from gateway.messages import ProtocolError

        return ProtocolError(v1.SERVER_BUSY, "full")


def chat_session(speculation="greedy", chat=True, **kwargs):
    s = Session(Limits(), Recorder(), Clock(), session_id="s1", chat=chat, **kwargs)
    s.receive(json.dumps({"type": "config", "format": "pcm_s16le", "chat": {"speculation": speculation}}))
    return s


def user(s, text, final=False, turn="t1"):
    return s.receive(json.dumps({"type": "user", "turn_id": turn, "text": text, "final": final}))


def thinks(actions) -> list[Think]:
    return [a for a in actions if isinstance(a, Think)]


def answer(s, think: Think, pieces, accepted=None):
    """The Thinker's pieces [(ids, text)] for `think`, then its end."""
    actions = []
    for i, (ids, text) in enumerate(pieces):
        actions += s.thought(think.id, ids, text, accepted if i == 0 else None)
    return actions + s.thought_done(think.id)


DRAFT = [([10, 11, 12], "Paris is"), ([13], " big."), ([14], " It")]  # "Paris is big. It"


def test_a_partial_question_starts_one_thoughtat_a_time_and_nothing_reaches_the_client():
    s = chat_session()
    first = user(s, "What is")
    assert len(thinks(first)) == 1 and not messages(first)
    assert thinks(first)[0].messages[-1] == {"role": "user", "content": "What is"}
    assert user(s, "What is the capital") == []  # a round is in flight: the next waits for it
    after = answer(s, thinks(first)[0], DRAFT)
    assert StopThinking(thinks(first)[0].id) in after  # its draft holds a first sentence: drafting on costs only time
    assert not [a for a in after if isinstance(a, Synthesize)]  # words came meanwhile: the next round verifies it first
    again = thinks(after)
    assert len(again) == 1 and again[0].draft == (10, 11, 12, 13, 14)  # verify the draft against the new words
    assert again[0].messages[-1]["content"] == "What is the capital"
    kept = answer(s, again[0], DRAFT, accepted=5)
    held = [a.job for a in kept if isinstance(a, Synthesize)]
    assert [j.sentences[0].text for j in held] == ["Paris is big."]  # the first sentence, out of sight
    assert messages(after + kept) == [] and frames(after + kept) == []
    assert s.audio(held[0].id, np.ones(2205, np.float32), 0, []) == []  # held audio stays held


def test_the_final_input_takes_what_the_thoughtin_flight_drafted_so_far_as_its_draft():
    s = chat_session()
    thought = thinks(user(s, "What is the capital of France"))[0]
    s.thought(thought.id, [10, 11, 12], "Paris is", None)
    final = user(s, "What is the capital of France?", final=True)
    assert StopThinking(thought.id) in final and thinks(final)[0].draft == (10, 11, 12)


def test_the_final_input_releases_held_audio_when_the_verification_keeps_its_tokens():
    s = chat_session()
    thought = thinks(user(s, "What is the capital of France"))[0]
    job = [a.job for a in answer(s, thought, DRAFT) if isinstance(a, Synthesize)][0]
    s.audio(job.id, np.full(4410, 0.1, np.float32), 0, [])
    s.finished(job.id)
    final = user(s, "What is the capital of France?", final=True)
    start = [m for m in messages(final) if m["type"] == "audio_start"]
    assert start and start[0]["context_id"] == "t1"
    last = thinks(final)[0]
    assert last.draft == (10, 11, 12, 13, 14) and last.max_tokens == 256
    out = s.thought(last.id, [10, 11, 12, 13, 14, 15], "Paris is big. It is", 5)
    said = messages(out)
    assert said[0] == {"type": "reply", "turn_id": "t1", "outcome": "held", "rounds": 1, "draft_tokens": 5,
                       "accepted_tokens": 5}
    assert said[1] == {"type": "reply_text", "turn_id": "t1", "text": "Paris is big. "}  # its finished clauses
    assert frames(out)  # the held sentence's audio at once
    tail = s.thought(last.id, [16, END], " old.", None) + s.thought_done(last.id)
    assert [m["text"] for m in messages(tail) if m["type"] == "reply_text"] == ["It is old."]
    spoken = [a.job for a in tail if isinstance(a, Synthesize)]
    assert [j.sentences[0].text for j in spoken] == ["It is old."]  # the held sentence is not spoken again
    assert s.history == [{"role": "user", "content": "What is the capital of France?"},
                         {"role": "assistant", "content": "Paris is big. It is old."}]
    assert s.observer.chat_turns == ["held"] and s.observer.held_s == {True: 0.2, False: 0.0}


def test_a_rejected_draft_drops_its_held_audio_and_the_reply_is_spoken_from_its_start():
    s = chat_session()
    job = [a.job for a in answer(s, thinks(user(s, "Who"))[0], DRAFT) if isinstance(a, Synthesize)][0]
    s.audio(job.id, np.zeros(2205, np.float32), 0, [])
    final = user(s, "Who wrote Hamlet?", final=True)
    out = s.thought(thinks(final)[0].id, [20, 21], "Shakespeare did.", 0)
    assert messages(out)[0]["outcome"] == "rejected"
    assert Stop(job.id) in out and not s.is_current(job.id)
    assert s.observer.chat_turns == ["rejected"]
    done = s.thought_done(thinks(final)[0].id)
    assert [a.job.sentences[0].text for a in done if isinstance(a, Synthesize)] == ["Shakespeare did."]
    assert s.observer.held_s == {True: 0.0, False: 0.1}  # the held audio synthesized, thrown away


def test_a_draft_kept_short_of_the_held_sentence_is_partial():
    s = chat_session()
    answer(s, thinks(user(s, "What is"))[0], DRAFT)
    final = user(s, "What is the capital of Spain?", final=True)
    out = s.thought(thinks(final)[0].id, [10, 11, 12, 40], "Paris is not", 3)
    assert messages(out)[0]["outcome"] == "partial" and messages(out)[0]["accepted_tokens"] == 3
    assert not frames(out)


def test_a_revised_sentence_replaces_the_held_audio():
    s = chat_session()
    first = [a.job for a in answer(s, thinks(user(s, "What is"))[0], DRAFT) if isinstance(a, Synthesize)][0]
    r2 = thinks(user(s, "What is the capital"))[0]
    revised = answer(s, r2, [([10, 11], "Paris is"), ([30], " huge."), ([31], " Yes")], accepted=2)
    assert Stop(first.id) in revised
    assert [a.job.sentences[0].text for a in revised if isinstance(a, Synthesize)] == ["Paris is huge."]
    assert s.observer.chat_rounds == 2


def test_speculation_off_thinks_only_on_the_final_input_and_says_off():
    s = chat_session("off")
    assert user(s, "What is the") == []
    final = user(s, "What is the time?", final=True)
    think = thinks(final)[0]
    assert think.draft == () and think.top_k == 1
    assert messages(s.thought(think.id, [5], "Noon.", None))[0]["outcome"] == "off"


def test_a_long_conversation_is_answered_without_speculation():
    s = Session(Limits(chat_speculation_chars=60), Recorder(), Clock(), chat=True)
    s.receive(json.dumps({"type": "config", "chat": {"speculation": "greedy"}}))
    think = thinks(user(s, "Tell me about the sea.", final=True))[0]
    s.thought(think.id, [1], "The sea is deep and wide, and it covers most of the Earth.", None)
    s.thought_done(think.id)
    assert thinks(user(s, "Why?", turn="t2")) == []  # the history is past the limit: no round
    final = thinks(user(s, "Why is it salty?", final=True, turn="t2"))[0]
    assert final.draft == ()
    assert messages(s.thought(final.id, [2], "Salt.", None))[0]["outcome"] == "off"


def test_top_k_asks_the_thinker_to_keep_tokens_within_the_best_k():
    s = Session(Limits(), Recorder(), Clock(), chat=True)
    s.receive(json.dumps({"type": "config", "chat": {"speculation": "top_k", "top_k": 5}}))
    assert thinks(user(s, "Hello there"))[0].top_k == 5


def test_rounds_per_turn_are_bounded():
    s = chat_session()
    pending = thinks(user(s, "w0"))
    for i in range(1, 3 * ch.MAX_ROUNDS):
        user(s, f"w0 w{i}")
        pending += thinks(answer(s, pending[-1], [([1], "a")]))
    assert len(pending) == ch.MAX_ROUNDS


def test_under_load_speculation_yields():
    s = chat_session(admission=Busy())
    assert user(s, "What is the") == []


def test_a_reply_refused_at_capacity_ends_its_turn_and_stops_what_it_ran():
    busy = Busy()
    s = chat_session(admission=busy)
    busy.refusal = lambda: None  # capacity while the question is spoken
    thought = thinks(user(s, "What is"))[0]
    busy.refusal = Busy.refusal.__get__(busy)  # and none left when it ends
    out = user(s, "What is it?", final=True)
    assert StopThinking(thought.id) in out and not thinks(out)
    assert messages(out)[-1]["code"] == v1.SERVER_BUSY and messages(out)[-1]["context_id"] == "t1"
    assert "t1" not in s.chatting and "t1" not in s.contexts


def test_cancel_before_the_final_input_stops_the_thoughtand_the_held_audio():
    s = chat_session()
    r1 = thinks(user(s, "What is"))[0]
    after = answer(s, r1, DRAFT)
    job = [a.job for a in after if isinstance(a, Synthesize)][0]
    r2 = thinks(user(s, "What is it"))[0] if not thinks(after) else thinks(after)[0]
    out = s.receive(json.dumps({"type": "cancel", "context_id": "t1"}))
    assert StopThinking(r2.id) in out and Stop(job.id) in out
    assert messages(out) == [{"type": "cancelled", "context_id": "t1"}]
    assert s.thought(r2.id, [1], "late", None) == []  # a piece after the cancel is dropped


def test_cancel_mid_reply_stops_the_thinker_and_the_speech():
    s = chat_session("off")
    think = thinks(user(s, "Tell me a story.", final=True))[0]
    out = s.thought(think.id, [1, 2], "Once upon a time. There", None)
    job = [a.job for a in out if isinstance(a, Synthesize)][0]
    cancel = s.receive(json.dumps({"type": "cancel", "context_id": "t1"}))
    assert StopThinking(think.id) in cancel and Stop(job.id) in cancel
    assert messages(cancel)[-1] == {"type": "cancelled", "context_id": "t1"}


def test_the_history_carries_earlier_turns_into_the_next_prompt():
    s = chat_session("off")
    think = thinks(user(s, "Hi.", final=True))[0]
    s.thought(think.id, [1], "Hello!", None)
    s.thought_done(think.id)
    second = thinks(user(s, "How are you?", final=True, turn="t2"))[0]
    assert second.messages == ({"role": "system", "content": DEFAULT_SYSTEM}, {"role": "user", "content": "Hi."},
                               {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "How are you?"})


def test_an_empty_system_prompt_is_none_and_a_given_one_replaces_the_default():
    assert parse_chat({"chat": {"system": ""}}).system is None
    assert parse_chat({"chat": {"system": "Be brief."}}).system == "Be brief."
    assert parse_chat({"chat": {}}).system == DEFAULT_SYSTEM


def test_a_failed_final_request_ends_the_turn_with_its_error():
    s = chat_session("off")
    think = thinks(user(s, "Hi.", final=True))[0]
    out = s.thought_failed(think.id, v1.BACKEND_UNAVAILABLE, "Triton unavailable")
    assert messages(out)[-1]["code"] == v1.BACKEND_UNAVAILABLE and messages(out)[-1]["context_id"] == "t1"
    assert "t1" not in s.contexts and "t1" not in s.chatting


def test_without_a_chat_model_a_user_message_is_refused_and_the_connection_stays():
    s = chat_session(chat=False)
    out = user(s, "Hello")
    assert messages(out)[0]["code"] == v1.CHAT_UNAVAILABLE and messages(out)[0]["context_id"] == "t1"


@pytest.mark.parametrize("chat", [{"speculation": "maybe"}, {"top_k": 0}, {"max_tokens": 10**6}, {"color": 1}])
def test_a_bad_chat_config_is_refused(chat):
    s = Session(Limits(), Recorder(), Clock(), chat=True)
    assert messages(s.receive(json.dumps({"type": "config", "chat": chat})))[0]["code"] == v1.INVALID_FIELD


def test_the_first_phrase_is_held_only_once_known_and_its_tokens_counted():
    assert ch.first_phrase("Paris is big", complete=False, language="en") is None
    assert ch.first_phrase("Paris is big", complete=True, language="en").text == "Paris is big"
    assert ch.first_phrase("Paris is big. It", complete=False, language="en").text == "Paris is big."
    assert ch.first_phrase("Well, Paris is", complete=False, language="en").text == "Well,"
    assert ch.first_phrase("Hi, Paris", complete=False, language="en") is None  # too short to go alone
    assert ch.tokens_covering([(3, 8), (4, 13), (5, 16)], 13) == 4
    assert ch.tokens_covering([(3, 8)], 13) is None


def test_the_outcome_of_a_verification():
    held = ch.Held(None, tokens=4, job_id=1)
    assert ch.outcome(Speculation.GREEDY, 4, held) is ch.Outcome.HELD
    assert ch.outcome(Speculation.GREEDY, 3, held) is ch.Outcome.PARTIAL
    assert ch.outcome(Speculation.TOP_K, 0, None) is ch.Outcome.REJECTED
    assert ch.outcome(Speculation.OFF, None, None) is ch.Outcome.OFF


def test_a_reply_is_spoken_from_its_first_phrase_then_by_sentences():
    s = chat_session(speculation="off")
    final = thinks(user(s, "What is the capital of France?", final=True))[0]
    first = s.thought(final.id, [10, 11], "Well, the capital", None)
    assert spoken(first) == ["Well,"]  # before the sentence is whole
    rest = s.thought(final.id, [12, 13], " is Paris, of course. It", None) + s.thought_done(final.id)
    job = held_job(first)
    assert spoken(s.audio(job.id, np.full(2205, 0.1, np.float32), 0, []) + s.finished(job.id) + rest) == [
        "the capital is Paris, of course.", "It"]


def test_a_draft_that_opens_with_a_phrase_holds_that_phrase():
    s = chat_session()
    round_ = thinks(user(s, "What is the capital of France"))[0]
    out = s.thought(round_.id, [10, 11], "Well, Paris", None)
    assert spoken(out) == ["Well,"] and StopThinking(round_.id) in out  # enough: the round stops at its phrase


def held_job(actions):
    return [a.job for a in actions if isinstance(a, Synthesize)][0]


def spoken(actions) -> list[str]:
    return [s.text for a in actions if isinstance(a, Synthesize) for s in a.job.sentences]


def test_a_partial_that_changes_nothing_starts_no_round():
    s = chat_session()
    first = thinks(user(s, "What is"))[0]
    assert user(s, "What is") == []  # in flight: nothing to wait for either
    after = answer(s, first, DRAFT)
    assert not thinks(after)  # no new words came while it ran
    assert user(s, "What is") == [] and s.observer.chat_rounds == 1


def test_a_round_asks_for_the_whole_reply_and_is_stopped_past_its_draft_tokens():
    s = chat_session()
    think = thinks(user(s, "Tell me"))[0]
    assert think.max_tokens == 256  # the config's: a round may become the final request
    outs = [s.thought(think.id, [100 + i], " word", None) for i in range(ch.DRAFT_TOKENS)]
    assert [i for i, out in enumerate(outs) if StopThinking(think.id) in out] == [ch.DRAFT_TOKENS - 1]


def test_a_round_in_flight_over_the_final_transcript_becomes_the_final_request():
    s = chat_session()
    question = "What is the capital of France?"
    think = thinks(user(s, question))[0]
    final = user(s, question, final=True)
    assert not thinks(final) and not [a for a in final if isinstance(a, StopThinking)]  # no new request, none stopped
    assert [m["type"] for m in messages(final)] == ["audio_start"]
    out = s.thought(think.id, [10, 11, 12, 13], "Paris is big.", None)
    assert messages(out)[0] == {"type": "reply", "turn_id": "t1", "outcome": "rejected", "rounds": 1,
                                "draft_tokens": 0, "accepted_tokens": 0}
    out += s.thought(think.id, [14, 15, END], " It is old.", None)
    assert StopThinking(think.id) not in out  # the reply is not stopped at its first sentence
    out += s.thought_done(think.id)
    assert "".join(m["text"] for m in messages(out) if m["type"] == "reply_text") == "Paris is big. It is old."
    assert spoken(out) == ["Paris is big."]  # spoken from its start (the next sentence once this one is)
    assert s.history[-1] == {"role": "assistant", "content": "Paris is big. It is old."}
    assert s.observer.chat_rounds == 0  # a round that became the reply ended with no draft


def test_a_round_in_flight_that_wrote_already_decides_the_reply_at_the_final_input():
    s = chat_session()
    job = held_job(answer(s, thinks(user(s, "What is the capital"))[0], DRAFT))
    s.audio(job.id, np.zeros(2205, np.float32), 0, [])
    question = "What is the capital of Spain?"
    think = thinks(user(s, question))[0]
    assert not s.thought(think.id, [10, 11, 30], "Paris is not", 2)  # no first sentence yet: it runs on
    final = user(s, question, final=True)
    assert not thinks(final) and StopThinking(think.id) not in final
    said = messages(final)
    assert [m["type"] for m in said] == ["audio_start", "reply"]  # no clause finished yet
    assert said[1]["outcome"] == "partial" and said[1]["accepted_tokens"] == 2 and said[1]["draft_tokens"] == 5
    assert Stop(job.id) in final  # the held sentence was not kept
    out = s.thought(think.id, [31, END], " the capital.", None) + s.thought_done(think.id)
    assert [m["text"] for m in messages(out) if m["type"] == "reply_text"] == ["Paris is not the capital."]
    assert spoken(out) == ["Paris is not the capital."]


def test_a_finished_draft_over_the_final_transcript_is_taken_whole_and_the_thinker_goes_on_after_it():
    s = chat_session()
    question = "What is the capital of France?"
    job = held_job(answer(s, thinks(user(s, question))[0], DRAFT))  # stopped at its first sentence
    s.audio(job.id, np.full(4410, 0.1, np.float32), 0, [])
    s.finished(job.id)
    final = user(s, question, final=True)
    said = messages(final)
    assert said[1] == {"type": "reply", "turn_id": "t1", "outcome": "held", "rounds": 1, "draft_tokens": 5,
                       "accepted_tokens": 5}
    assert said[2] == {"type": "reply_text", "turn_id": "t1", "text": "Paris is big. "}
    assert frames(final)  # the held sentence's audio at once, before the Thinker says a word
    [think] = thinks(final)
    assert think.prefix == (10, 11, 12, 13, 14) and think.draft == () and think.max_tokens == 256
    assert think.messages[-1] == {"role": "user", "content": question}
    out = s.thought(think.id, [15, 16, END], " is old.", None) + s.thought_done(think.id)
    assert [m["text"] for m in messages(out) if m["type"] == "reply_text"] == ["It is old."]
    assert spoken(out) == ["It is old."]
    assert s.history[-1] == {"role": "assistant", "content": "Paris is big. It is old."}
    assert s.observer.chat_turns == ["held"] and s.observer.held_s == {True: 0.2, False: 0.0}


def test_a_draft_that_ended_the_reply_is_the_whole_reply_without_a_request():
    s = chat_session()
    job = held_job(answer(s, thinks(user(s, "Hi there"))[0], [([7], "Hello"), ([8], "!"), ([END], "")]))
    final = user(s, "Hi there", final=True)
    assert not thinks(final) and "t1" not in s.chatting
    said = messages(final)
    assert said[1]["outcome"] == "held" and said[1]["accepted_tokens"] == 2  # the end token adds no text
    assert said[2]["text"] == "Hello!"
    done = s.audio(job.id, np.full(2205, 0.1, np.float32), 0, []) + s.finished(job.id)
    assert frames(done) and messages(done)[-1]["type"] == "done"
    assert s.history == [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"}]


def test_a_draft_over_other_words_than_the_final_ones_is_verified():
    s = chat_session()
    answer(s, thinks(user(s, "What is the capital of France"))[0], DRAFT)
    [think] = thinks(user(s, "What is the capital of France?", final=True))
    assert think.draft == (10, 11, 12, 13, 14) and think.prefix == ()


def test_released_held_audio_is_the_replys_and_stops_once_with_it():
    s = chat_session()
    job = held_job(answer(s, thinks(user(s, "What is the capital of France"))[0], DRAFT))
    s.audio(job.id, np.full(4410, 0.1, np.float32), 0, [])
    last = thinks(user(s, "What is the capital of France?", final=True))[0]
    assert messages(s.thought(last.id, [10, 11, 12, 13, 14, 15], "Paris is big. It is", 5))[0]["outcome"] == "held"
    cancel = s.receive(json.dumps({"type": "cancel", "context_id": "t1"}))
    assert cancel.count(Stop(job.id)) == 1
    assert s.observer.held_s == {True: 0.2, False: 0.0}  # released, not also thrown away


def test_a_draft_for_revised_words_drops_the_held_sentence_it_no_longer_starts_with():
    s = chat_session()
    job = held_job(answer(s, thinks(user(s, "What is"))[0], DRAFT))
    r2 = thinks(user(s, "What is the capital"))[0]
    user(s, "What is the capital of Spain")  # words come while r2 runs
    out = answer(s, r2, [([30], "Madrid is"), ([31], " big."), ([32], " Yes")], accepted=0)
    assert Stop(job.id) in out and not [a for a in out if isinstance(a, Synthesize)]
    assert thinks(out)[0].draft == (30, 31, 32)


def test_a_partial_that_reads_as_a_whole_question_preempts_the_round_over_fewer_words():
    s = chat_session()
    first = thinks(user(s, "What is the"))[0]
    s.thought(first.id, [10, 11], "Paris is", None)
    assert user(s, "What is the capital") == []  # words that do not end a question wait for the round
    whole = user(s, "What is the capital of France?")
    assert StopThinking(first.id) in whole
    (again,) = thinks(whole)
    assert again.messages[-1]["content"] == "What is the capital of France?"
    assert again.draft == (10, 11)  # what the stopped round wrote is verified, not thrown away


def test_a_reply_that_loops_ends_before_the_clause_that_repeats_it_and_stops_the_thinker():
    s = chat_session(speculation="off")
    final = thinks(user(s, "What is the capital of France?", final=True))[0]
    out = s.thought(final.id, [1, 2, 3], "La femme de France, le capital de la femme", None)
    assert [m["text"] for m in messages(out) if m["type"] == "reply_text"] == ["La femme de France, "]
    out = s.thought(final.id, [4, 5], " de France, le paysage", None)
    assert StopThinking(final.id) in out  # the reply is over: nothing of the repeat is said
    assert "reply_text" not in [m["type"] for m in messages(out)]
    assert s.history[-1] == {"role": "assistant", "content": "La femme de France, "}
    assert s.thought(final.id, [6], " de la femme", None) == []  # a piece after the end is dropped


def test_repetition_releases_finished_clauses_and_stops_before_a_repeat():
    assert repetition.release("The capital of France is Paris.", 0, whole=False) == (0, False)
    assert repetition.release("The capital of France is Paris.", 0, whole=True) == (31, False)
    assert repetition.release("Well, the capital", 0, whole=False) == (6, False)
    text = "I'm so glad you're here! I'm so glad you're here, and"
    assert repetition.release(text, 0, whole=True) == (25, True)
    # Three words again are no loop; four are.
    assert repetition.release("It is big. It is big, yes.", 0, whole=True) == (26, False)
    assert repetition.release("It is very big. It is very big.", 0, whole=True) == (16, True)


def test_a_reply_ends_after_its_max_sentences_and_stops_the_thinker():
    assert repetition.release("Paris is big. It is old, and", 0, whole=False, max_sentences=1) == (14, True)
    assert repetition.release("Paris is big. It is old.", 0, whole=True, max_sentences=2) == (24, False)  # its own end
    assert repetition.release("Paris is big. It is old.", 0, whole=True) == (24, False)  # 0: no limit
    s = Session(Limits(), Recorder(), Clock(), session_id="s1", chat=True)
    s.receive(json.dumps({"type": "config", "chat": {"speculation": "off", "max_sentences": 1}}))
    final = thinks(user(s, "Tell me about Paris.", final=True))[0]
    out = s.thought(final.id, [1, 2, 3], "Paris is big. It is", None)
    assert [m["text"] for m in messages(out) if m["type"] == "reply_text"] == ["Paris is big. "]
    assert StopThinking(final.id) in out and s.history[-1] == {"role": "assistant", "content": "Paris is big. "}


@pytest.mark.parametrize("value", [-1, 101, "2", 1.5])
def test_a_bad_max_sentences_is_refused(value):
    s = Session(Limits(), Recorder(), Clock(), session_id="s1", chat=True)
    (error,) = messages(s.receive(json.dumps({"type": "config", "chat": {"max_sentences": value}})))
    assert error["type"] == "error" and error["code"] == "invalid_field"


def test_a_seed_goes_with_every_thinker_request_of_the_conversation():
    s = Session(Limits(), Recorder(), Clock(), session_id="s1", chat=True)
    s.receive(json.dumps({"type": "config", "chat": {"speculation": "greedy", "temperature": 0.7, "seed": 7}}))
    round_ = thinks(user(s, "What is"))[0]
    final = thinks(user(s, "What is it?", final=True))
    assert round_.seed == 7 and all(t.seed == 7 for t in final)
    assert parse_chat({"chat": {}}).seed is None


@pytest.mark.parametrize("seed", [-1, 2**63, 1.5, "7"])
def test_a_bad_seed_is_refused_and_the_connection_stays(seed):
    s = chat_session()
    out = s.receive(json.dumps({"type": "config", "chat": {"seed": seed}}))
    assert [m["code"] for m in messages(out) if m["type"] == "error"] == [v1.INVALID_FIELD]
