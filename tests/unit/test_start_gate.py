"""A context's first audio held until a stall cannot follow it (gateway/conversation/start_gate.py),
alone and on the sans-I/O session with a hand-moved clock."""

import pytest

from contract.models import DEFAULT_VOICE, SECONDS_PER_CHAR
from gateway.conversation.contexts import AdmitAll, Limits
from gateway.conversation.start_gate import SpeakingPace, StartGate
from gateway.protocols.session import Session
from tests.unit.test_gateway_session import Clock, Recorder, frames, jobs, messages, send, session, speech

TEXT = "The birch canoe slid on the smooth planks. " * 4  # 172 characters: about 8.6 s expected


def test_audio_faster_than_real_time_opens_the_gate_with_its_first_chunk():
    gate = StartGate(began=0.0, expected_s=10.0)
    gate.arrived(0.5, now=0.1)  # five times real time
    assert gate.lack_s(0.1) == 0 and gate.is_open(0.1)


def test_audio_slower_than_real_time_is_held_until_it_covers_what_the_rest_will_lack():
    gate = StartGate(began=0.0, expected_s=10.0)
    gate.arrived(1.0, now=2.0)  # half real time: the other 9 s come in 18 s while 10 s play
    assert gate.lack_s(2.0) == pytest.approx(9.0) and not gate.is_open(2.0)
    gate.arrived(3.0, now=4.0)  # 4 s in 4 s: real time, and 4 s in hand cover the 2 s gap
    assert gate.lack_s(4.0) == 0 and gate.longest_gap_s == 2.0 and gate.is_open(4.0)
    held = StartGate(began=0.0, expected_s=10.0)
    held.arrived(0.5, now=0.2)
    held.arrived(0.5, now=1.0)  # faster than real time, but a gap of 0.8 s against 1 s in hand
    assert held.is_open(1.0)
    held.arrived(0.1, now=2.2)  # now 1.2 s apart, with 1.1 s in hand
    assert not held.is_open(2.2)


def test_a_first_chunk_that_came_late_is_held_until_the_audio_in_hand_outlasts_that_wait():
    # A burst of starts: the stream's whole first sentence comes at once, 1.6 s after the
    # request, near real time; its next sentence will wait as long behind the others' work.
    gate = StartGate(began=0.0, expected_s=16.0)
    gate.arrived(1.5, now=1.6)
    assert gate.longest_gap_s == pytest.approx(1.6) and not gate.is_open(1.6)
    gate.arrived(0.8, now=2.2)  # 2.3 s in 2.2 s: faster than real time, and outlasting the 1.6 s wait
    assert gate.lack_s(2.2) == 0 and gate.is_open(2.2)


def test_nothing_in_hand_never_opens_and_all_audio_in_hand_lacks_nothing():
    assert not StartGate(began=0.0, expected_s=1.0).is_open(5.0)
    gate = StartGate(began=0.0, expected_s=1.0)
    gate.arrived(1.2, now=3.0)  # slow, and after a 3 s wait, but the whole text is in hand
    assert gate.lack_s(3.0) == 0 and gate.is_open(3.0)


def test_a_slow_start_is_held_then_goes_out_whole_and_in_order_with_its_timestamps():
    s, recorder, clock = session()
    s.start()
    send(s, type="config", timestamps=True, format="pcm_s16le", sample_rate=24000)
    (job,) = jobs(send(s, type="speak", context_id="a", text=TEXT))
    clock.now += 1.0
    assert s.audio(job.id, speech(0.5), 0, [("The", 0, 100)]) == []  # half real time: held
    assert s.contexts["a"].lead_s(clock.now) == 0.0 and recorder.first_audio_s == []
    clock.now += 0.5
    assert s.audio(job.id, speech(0.5), 0, []) == []  # 1 s in 1.5 s: still slower than real time
    clock.now += 0.3
    released = s.audio(job.id, speech(4.0), 1, [("The", 0, 100)])  # 5 s in 1.8 s
    sent = frames(released)
    assert [f.seq for f in sent] == list(range(len(sent))) and sent[0].sample_offset == 0
    assert [m["type"] for m in messages(released)] == ["timestamps", "timestamps"]
    assert isinstance(released[0].data, str)  # each sentence's timestamps before its frames, as they came
    assert recorder.first_audio_s == [pytest.approx(1.8)]  # the listener's first audio came then
    assert s.contexts["a"].lead_s(clock.now) == pytest.approx(len(sent) * 0.02, abs=0.1)
    clock.now += 0.1
    assert frames(s.audio(job.id, speech(1.0), 1, []))  # the gate is gone: the rest goes out as it comes


def test_a_fast_start_goes_out_with_its_first_chunk():
    s, recorder, clock = session()
    s.start()
    (job,) = jobs(send(s, type="speak", context_id="a", text=TEXT))
    clock.now += 0.1
    assert frames(s.audio(job.id, speech(0.5), 0, []))
    assert recorder.first_audio_s == [pytest.approx(0.1)]


@pytest.mark.parametrize("end,last", [("text", None), ("speak", "done"), ("failed", "error")])
def test_what_is_held_goes_out_when_no_more_audio_is_coming_for_now(end, last):
    s, _, clock = session()
    s.start()
    (job,) = jobs(send(s, type="speak" if end == "speak" else "text", context_id="a", text=TEXT))
    clock.now += 2.0
    assert s.audio(job.id, speech(0.5), 0, []) == []
    # A text's job ends with the text in hand spoken (more may come later); a speak's with its end.
    after = s.failed(job.id, "synthesis_failed", "gone") if end == "failed" else s.finished(job.id)
    assert len(frames(after)) >= 20  # the 0.5 s held
    assert (messages(after)[-1]["type"] if messages(after) else None) == last


def test_a_cancelled_context_drops_what_was_held_and_the_switch_turns_the_gate_off():
    s, _, clock = session()
    s.start()
    (job,) = jobs(send(s, type="speak", context_id="a", text=TEXT))
    clock.now += 2.0
    assert s.audio(job.id, speech(0.5), 0, []) == []
    assert [m["type"] for m in messages(send(s, type="cancel", context_id="a"))] == ["cancelled"]
    s.speaking.start_when_safe = False
    (job,) = jobs(send(s, type="speak", context_id="b", text=TEXT))
    clock.now += 2.0
    assert frames(s.audio(job.id, speech(0.5), 0, []))


class OthersAhead(AdmitAll):
    """An admission with room to spare whose other streams are all `lead_s` ahead of
    their listeners, while streams starting elsewhere (a flood's) take the servers
    `others_first_s` to make their first chunks; it notes what it was asked."""

    def __init__(self, lead_s, others_first_s=0.0):
        self.lead_s, self.others_first, self.asked = lead_s, others_first_s, []

    def starts_in_time(self, context_id, in_hand_s):
        self.asked.append((context_id, in_hand_s))
        return self.lead_s >= in_hand_s

    def others_first_s(self, context_id, first_chunk_s):
        return self.others_first


class OthersStarting(AdmitAll):
    """An Admission whose other streams starting take the servers `seconds` to make
    their first chunks."""

    def __init__(self, seconds):
        self.seconds, self.asked = seconds, []

    def others_first_s(self, context_id, first_chunk_s):
        self.asked.append((context_id, first_chunk_s))
        return self.seconds


def speaking(admission):
    """A session on `admission` speaking TEXT in context "a": it, its clock and the job."""
    clock = Clock()
    s = Session(Limits(), Recorder(), clock, admission=admission)
    s.start()
    (job,) = jobs(send(s, type="speak", context_id="a", text=TEXT))
    return s, clock, job


def test_the_audio_in_hand_must_outlast_the_other_streams_first_chunks_too():
    # Their first chunks go before this stream's next at the servers, however fast its own came.
    gate = StartGate(began=0.0, expected_s=10.0)
    gate.arrived(0.5, now=0.1)  # five times real time, after a 0.1 s wait
    assert gate.first_chunk_s == 0.5
    assert gate.is_open(0.1, others_first_s=0.4) and not gate.is_open(0.1, others_first_s=0.5)
    gate.arrived(0.5, now=0.3)
    assert gate.first_chunk_s == 0.5 and gate.is_open(0.3, others_first_s=0.5)  # 1 s in hand outlasts both
    whole = StartGate(began=0.0, expected_s=1.0)
    whole.arrived(1.0, now=0.1)  # all of its text: nothing more to wait for
    assert whole.is_open(0.1, others_first_s=float("inf"))


@pytest.mark.parametrize("others_first_s,sent", [(0.3, True), (0.5, False)])
def test_a_session_holds_a_fast_first_chunk_while_other_streams_first_chunks_would_outlast_it(
        others_first_s, sent):
    admission = OthersStarting(others_first_s)
    s, clock, job = speaking(admission)
    clock.now += 0.1
    assert bool(frames(s.audio(job.id, speech(0.5), 0, []))) == sent  # five times real time
    assert admission.asked == [("a", pytest.approx(0.5))]
    clock.now += 0.2
    out = frames(s.audio(job.id, speech(0.5), 0, []))  # 1 s in hand outlasts the others' first chunks
    assert out and (sent or out[0].sample_offset == 0)  # held: both chunks, from the first sample


@pytest.mark.parametrize("others_lead_s,sent", [(0.3, False), (0.6, True)])
def test_a_start_held_by_others_starting_goes_out_at_once_while_every_other_stream_is_further_ahead_than_its_audio_in_hand(
        others_lead_s, sent):
    admission = OthersAhead(others_lead_s, others_first_s=1.0)  # a flood's starts: the gate alone would hold it
    s, clock, job = speaking(admission)
    clock.now += 0.1
    out = s.audio(job.id, speech(0.5), 0, [])
    assert bool(frames(out)) == sent and admission.asked == [("a", pytest.approx(0.5))]


def test_a_start_that_queued_longer_than_its_audio_in_hand_is_held_however_far_ahead_the_others_are():
    # Listeners started together past what the servers sustain: the last first chunks
    # come late and small, and the next waits as long, however urgent.
    admission = OthersAhead(10.0)
    s, clock, job = speaking(admission)
    clock.now += 2.5
    assert s.audio(job.id, speech(0.5), 0, []) == [] and admission.asked == []
    for prompt_s, outlasts in [(0.3, True), (0.0, False)]:  # the voice's prompt is no queue
        gate = StartGate(began=0.0, expected_s=8.0, prompt_s=prompt_s)
        gate.arrived(0.5, now=0.7)
        assert gate.outlasts_its_queue() == outlasts


def test_the_pace_of_a_voice_is_learned_from_its_jobs_and_of_no_other():
    pace = SpeakingPace()
    assert pace.seconds_per_char("a") == SECONDS_PER_CHAR  # nothing spoken yet: the prior
    pace.spoke("a", 15, 4.5)  # six times the prior's audio a character
    assert SECONDS_PER_CHAR < pace.seconds_per_char("a") < 0.3  # one job moves it, some way
    for _ in range(19):
        pace.spoke("a", 15, 4.5)
    assert pace.seconds_per_char("a") == pytest.approx(0.3, rel=0.1)  # twenty: the voice's own
    pace.spoke("a", 0, 1.0)  # a job of no text (a pause) says nothing of the pace
    assert pace.seconds_per_char("a") == pytest.approx(0.3, rel=0.1)
    assert pace.seconds_per_char("b") == SECONDS_PER_CHAR


def gate_after_a_slow_chunk(pace):
    """Whether "Hello there." is held when 0.7 s of its audio came after 1 s, on a session
    whose voice has `pace`: the prior expects 0.6 s of it, all in hand."""
    clock = Clock()
    s = Session(Limits(), Recorder(), clock, pace=pace)
    s.start()
    (job,) = jobs(send(s, type="speak", context_id="a", text="Hello there."))
    clock.now += 1.0
    return s.audio(job.id, speech(0.7), 0, []) == []


def test_a_voice_slower_per_character_than_the_prior_is_held_as_its_pace_says():
    assert not gate_after_a_slow_chunk(SpeakingPace())  # all it expects is in hand: out
    slow = SpeakingPace()
    for _ in range(20):
        slow.spoke(DEFAULT_VOICE, 15, 4.5)
    assert gate_after_a_slow_chunk(slow)  # 3.6 s expected, 0.7 s in hand at 0.7 × real time: held


def test_each_finished_job_teaches_the_sessions_pace_its_voices_audio_per_character():
    s, _, clock = session()
    s.start()
    (job,) = jobs(send(s, type="speak", context_id="a", text=TEXT))
    chars = sum(len(sentence.text) for sentence in job.sentences)
    clock.now += 0.1
    s.audio(job.id, speech(chars * 0.2), 0, [])  # four times the prior's audio a character
    assert s.speaking.pace.seconds_per_char(DEFAULT_VOICE) == SECONDS_PER_CHAR  # a job counts once finished
    s.finished(job.id)
    prior_s, prior_chars = SpeakingPace.PRIOR_CHARS * SECONDS_PER_CHAR, SpeakingPace.PRIOR_CHARS
    after_one = (SpeakingPace.DECAY * prior_s + chars * 0.2) / (SpeakingPace.DECAY * prior_chars + chars)
    assert s.speaking.pace.seconds_per_char(DEFAULT_VOICE) == pytest.approx(after_one, rel=0.01)


def test_the_voices_prompt_is_left_out_of_the_rate_and_a_queues_wait_is_not():
    # An AR start: its first 0.1 s came 0.2 s after the request, the next 0.25 s 0.2 s later.
    alone = StartGate(began=0.0, expected_s=3.0)
    prompted = StartGate(began=0.0, expected_s=3.0, prompt_s=0.15)
    for gate in (alone, prompted):
        gate.arrived(0.1, now=0.2)
        gate.arrived(0.25, now=0.4)
    assert alone.lack_s(0.4) > 0 and not alone.is_open(0.4)  # 0.875 × real time since the request
    assert prompted.lack_s(0.4) == 0 and prompted.is_open(0.4)  # 1.4 × since the prompt
    # A queue's wait is no prompt: a first chunk 1 s late is still weighed as slow.
    queued = StartGate(began=0.0, expected_s=3.0, prompt_s=0.15)
    queued.arrived(0.6, now=1.0)
    assert queued.lack_s(1.0) == pytest.approx(2.4 * (1 - 0.6 / 0.85) / (0.6 / 0.85))
    assert not queued.is_open(1.0)


def test_a_chunk_within_the_prompts_wait_lacks_nothing():
    gate = StartGate(began=0.0, expected_s=3.0, prompt_s=0.15)
    assert gate.lack_s(0.1) == 0 and gate.lack_s(0.2) == float("inf")
    gate.arrived(0.1, now=0.1)
    assert gate.lack_s(0.1) == 0


def test_a_voices_prompt_is_the_least_first_wait_of_its_recent_starts_and_of_no_other():
    pace = SpeakingPace()
    assert pace.prompt_s("a") == 0  # no start yet: the whole first wait counts
    for wait_s in (0.4, 0.2, 0.3):
        pace.started("a", wait_s)
    assert pace.prompt_s("a") == 0.2 and pace.prompt_s("b") == 0
    for _ in range(SpeakingPace.PROMPT_STARTS):
        pace.started("a", 0.5)  # a queue every start shared, long enough: taken for the prompt
    assert pace.prompt_s("a") == 0.5


def test_a_session_learns_its_voices_prompt_from_each_starts_first_chunk():
    s, _, clock = session()
    s.start()
    (job,) = jobs(send(s, type="speak", context_id="a", text=TEXT))
    clock.now += 0.25
    s.audio(job.id, speech(0.1), 0, [])
    clock.now += 0.5
    s.audio(job.id, speech(0.1), 0, [])  # not a first chunk
    assert s.speaking.pace.prompt_s(DEFAULT_VOICE) == pytest.approx(0.25)
    send(s, type="speak", context_id="b", text=TEXT)  # the next start's gate leaves it out
    assert s.contexts["b"].gate.prompt_s == pytest.approx(0.25)
