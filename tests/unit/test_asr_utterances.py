"""The recognizer's policy (python_backends.asr.utterances): when speech starts and stops,
when passes run, which events go out and in what order. These tests run it over a
scripted VAD and a scripted transcriber (tests/asr_fakes.py), not Silero and Whisper: they
test the policy, given what the engines would say; tests/unit/test_asr_engines.py and
tests/integration/test_asr.py hear real speech."""

import numpy as np
import pytest

from contract.models import FINAL, PARTIAL, SPEECH_STARTED, SPEECH_STOPPED
from python_backends.asr.utterances import BLOCK, Policy, Utterances
from tests.asr_fakes import MS, Script, ScriptedTranscriber, ScriptedVad

QUESTION = "what is your favorite kind of music"
ENDPOINT_MS = 500


def run(script, request_ms=100, endpoint_ms=ENDPOINT_MS, partials=True, end_at_ms=None, policy=Policy()):
    """The script's audio heard in requests of `request_ms` (with END after the one that
    reaches `end_at_ms`): its events, each with the end of the request that caused it
    (ms), and the transcriber (its passes)."""
    transcriber = ScriptedTranscriber(script)
    utterances = Utterances(ScriptedVad(script), transcriber, policy)
    events = []
    for start in range(0, script.length_ms, request_ms):
        end = min(start + request_ms, script.length_ms)
        ending = end_at_ms is not None and start < end_at_ms <= end
        heard = utterances.hear(script.audio(start, end_at_ms if ending else end), endpoint_ms, partials, end=ending)
        events += [(end, e) for e in heard]
        if ending:
            break
    return events, transcriber


def kinds(events):
    return [e.kind for _, e in events]


def one_question(speech_ms=(1000, 3000), length_ms=5000):
    return Script([(*speech_ms, QUESTION)], length_ms)


def test_silence_and_sounds_too_short_for_speech_cause_nothing():
    assert run(Script([], 3000))[0] == []
    blips = Script([(500, 600, "tick"), (1500, 1650, "cough")], 3000)
    events, transcriber = run(blips)
    assert events == [] and transcriber.passes == []


def test_an_utterance_is_started_partials_then_stopped_and_one_final():
    events, _ = run(one_question())
    assert kinds(events)[0] == SPEECH_STARTED and kinds(events)[-2:] == [SPEECH_STOPPED, FINAL]
    assert set(kinds(events)[1:-2]) == {PARTIAL}
    started, stopped, final = events[0][1], events[-2][1], events[-1][1]
    assert abs(started.audio_ms - 1000) <= 32 and abs(stopped.audio_ms - 3000) <= 32  # to a VAD block
    assert final.text == QUESTION and {e.utterance for _, e in events} == {0}


def test_partials_grow_never_take_back_a_word_and_show_no_guess():
    partials = [e.text for _, e in run(one_question())[0] if e.kind == PARTIAL]
    assert len(partials) >= 4
    for shorter, longer in zip(partials, partials[1:]):
        assert longer.startswith(shorter + " ")
    assert not any("-uh" in p for p in partials)  # a word cut short is never shown
    assert partials[-1] == QUESTION


def test_a_partial_comes_at_least_every_half_second_of_speech():
    events, _ = run(one_question())
    times = [e.audio_ms for _, e in events if e.kind == PARTIAL]
    assert times[0] - 1000 <= 1000  # two passes must agree on two words before the first
    assert max(np.diff(times)) <= 500


def test_the_whole_question_is_a_partial_when_speech_stops_and_the_final_at_the_endpoint_without_another_pass():
    events, transcriber = run(one_question())
    settled = events[-3]
    assert settled[1].kind == PARTIAL and settled[1].text == QUESTION
    assert settled[0] <= 3000 + 200  # heard by the request after the hangover (100 ms, to a block)
    assert events[-1][0] == events[-2][0] <= 3000 + ENDPOINT_MS + 100  # the endpoint, to a request
    assert transcriber.passes[-1][1] == settled[1].audio_ms * MS  # no pass after the one at the stop
    assert events[-1][1].audio_ms == settled[1].audio_ms


def test_speech_that_resumes_before_the_endpoint_is_the_same_utterance():
    script = Script([(1000, 2000, "what is your"), (2300, 3300, "favorite kind of music")], 5000)
    events, _ = run(script)
    assert kinds(events).count(SPEECH_STARTED) == 1 and kinds(events).count(FINAL) == 1
    assert events[-1][1].text == QUESTION and abs(events[-2][1].audio_ms - 3300) <= 32
    partials = [e.text for _, e in events if e.kind == PARTIAL]
    assert "what is your" in partials  # the pause's settled partial, kept as the speech went on


def test_two_utterances_are_numbered_in_order():
    script = Script([(500, 1500, "hello there"), (2500, 3500, "how are you")], 4500)
    events, _ = run(script)
    finals = [e for _, e in events if e.kind == FINAL]
    assert [(f.utterance, f.text) for f in finals] == [(0, "hello there"), (1, "how are you")]
    assert kinds(events).index(FINAL) < [e.utterance for _, e in events].index(1)


def test_end_ends_the_utterance_at_once():
    events, transcriber = run(one_question(length_ms=3000), end_at_ms=2600)
    assert kinds(events)[-2:] == [SPEECH_STOPPED, FINAL]
    assert events[-1][0] == 2600 and events[-2][1].audio_ms == 2600  # speech still going: it stopped at END
    assert transcriber.passes[-1][1] == 2600 * MS  # the final heard every sample sent, a part block too


def test_end_in_silence_or_on_nothing_to_hear():
    assert run(Script([], 2000), end_at_ms=1000)[0] == []
    events, _ = run(one_question(), end_at_ms=3050)  # silence begun, the hangover not yet
    assert kinds(events)[-2:] == [SPEECH_STOPPED, FINAL] and events[-1][1].text == QUESTION


def test_end_on_speech_too_short_to_be_sure_of_is_an_utterance():
    events, _ = run(Script([(1000, 1300, "yes")], 2000), end_at_ms=1100)
    assert kinds(events) == [SPEECH_STARTED, SPEECH_STOPPED, FINAL]


def test_without_partials_one_pass_an_utterance():
    events, transcriber = run(one_question(), partials=False)
    assert kinds(events) == [SPEECH_STARTED, SPEECH_STOPPED, FINAL]
    assert events[-1][1].text == QUESTION and len(transcriber.passes) == 1
    assert abs(transcriber.passes[0][1] - (3000 + Policy().tail_ms) * MS) <= BLOCK  # the speech, and its tail


@pytest.mark.parametrize("partials", [True, False])
def test_audio_faster_than_real_time_is_cut_as_in_real_time(partials):
    script = Script([(500, 2500, QUESTION), (3200, 4000, "thank you")], 6000)
    small = run(script, request_ms=20, partials=partials)[0]
    whole_seconds = run(script, request_ms=1000, partials=partials)[0]
    assert [e for _, e in small] == [e for _, e in whole_seconds]


def test_an_empty_final_closes_an_utterance_heard_as_no_words():
    script = one_question()
    utterances = Utterances(ScriptedVad(script), Silent())
    events = utterances.hear(script.audio(), ENDPOINT_MS)
    assert [(e.kind, e.text) for e in events] == [(SPEECH_STARTED, ""), (SPEECH_STOPPED, ""), (FINAL, "")]


class Silent:
    def transcribe(self, audio):
        return ""


def test_passes_run_no_more_often_than_asked():
    policy = Policy(partial_every_ms=300)
    _, transcriber = run(one_question(), request_ms=20, policy=policy)
    ends = [end for _, end in transcriber.passes[:-1]]  # the last, at the stop, runs at once
    assert min(np.diff(ends)) >= 300 * MS


def test_a_long_utterance_ends_at_its_next_pause_and_one_too_long_at_once():
    policy = Policy(long_utterance_ms=1200, max_utterance_ms=4000)
    paused = Script([(500, 2000, "one two three"), (2200, 3500, "four five six")], 5000)
    events, _ = run(paused, policy=policy)
    assert [e.text for _, e in events if e.kind == FINAL] == ["one two three", "four five six"]
    endless = Script([(500, 6000, "a b c d e f g h i j k")], 7000)
    events, _ = run(endless, policy=policy)
    stops = [e.audio_ms for _, e in events if e.kind == SPEECH_STOPPED]
    assert abs(stops[0] - 4500) <= 32 and kinds(events).count(SPEECH_STARTED) == 2


def test_endpoint_is_the_requests_own():
    early = run(one_question(), endpoint_ms=200)[0]
    late = run(one_question(), endpoint_ms=1500)[0]
    assert early[-1][0] <= 3300 and late[-1][0] >= 4500


def test_only_the_audio_a_pass_may_hear_is_kept():
    script = Script([], 60_000)
    utterances = Utterances(ScriptedVad(script), ScriptedTranscriber(script))
    for start in range(0, 60_000, 1000):
        utterances.hear(script.audio(start, start + 1000), ENDPOINT_MS)
    assert len(utterances.audio) <= Policy().samples(Policy().preroll_ms) + BLOCK


class Detector:
    """A turn detector that answers `p`, and keeps the audio it was asked about."""

    def __init__(self, p: float) -> None:
        self.p, self.asked = p, []

    def finished(self, audio: np.ndarray) -> float:
        self.asked.append(len(audio))
        return self.p


def run_smart(p: float, script=None, endpoint_ms=ENDPOINT_MS, smart=True):
    script = script or Script([(1000, 3000, QUESTION + "?")], 5000)
    detector = Detector(p)
    utterances = Utterances(ScriptedVad(script), ScriptedTranscriber(script), Policy(), detector)
    events = []
    for start in range(0, script.length_ms, 100):
        events += [(start + 100, e) for e in utterances.hear(script.audio(start, start + 100), endpoint_ms, smart=smart)]
    return events, detector


def test_a_turn_the_detector_hears_as_over_ends_at_its_short_silence_with_the_settled_words():
    events, detector = run_smart(0.9)
    assert kinds(events)[-2:] == [SPEECH_STOPPED, FINAL] and events[-1][1].text == QUESTION + "?"
    assert events[-1][0] <= 3000 + Policy().smart_silence_ms + 100  # not the endpoint's 500 ms
    assert len(detector.asked) == 1  # asked once, over the utterance and its preroll
    assert detector.asked[0] * 1000 // 16000 >= 2000 + Policy().smart_silence_ms


def test_a_turn_the_detector_hears_as_unfinished_waits_for_the_endpoint():
    events, detector = run_smart(0.1)
    assert kinds(events)[-2:] == [SPEECH_STOPPED, FINAL]
    assert events[-1][0] >= 3000 + ENDPOINT_MS and len(detector.asked) == 1


def test_a_pause_the_detector_hears_as_unfinished_keeps_one_utterance():
    paused = Script([(1000, 2000, "what is your favorite."), (2400, 3400, "kind of music?")], 5000)  # a 400 ms pause
    events, detector = run_smart(0.1, paused)
    assert kinds(events).count(FINAL) == 1 and len(detector.asked) == 2  # asked at each pause


def test_words_that_end_no_sentence_keep_the_turn_open_whatever_the_detector_says():
    paused = Script([(1000, 2000, "if you could live anywhere,"), (2400, 3400, "where would you live?")], 5000)
    events, detector = run_smart(0.9, paused)
    assert kinds(events).count(FINAL) == 1 and len(detector.asked) == 1  # asked only where the words end a sentence


def test_without_smart_the_detector_is_never_asked():
    events, detector = run_smart(0.9, smart=False)
    assert detector.asked == [] and events[-1][0] >= 3000 + ENDPOINT_MS
