"""gateway/backends/resumption.py, sans I/O: what a failed request issues again, and what of its
audio is dropped, kept or renumbered so the listener hears the whole request once."""

import numpy as np
import pytest

from gateway.backends.resumption import RETRY_MAX_S, RETRY_S, Resumption, TtsChunk

SENTENCES = ("One.", "Two two.", "Three three three.")
GONE, REFUSED = True, False  # the request's server or stage went away, or not


def chunk(sentence: int, samples: range, words: list[tuple[str, int, int]] = ()) -> TtsChunk:
    """A chunk whose samples count up, so what was dropped or kept can be read off them."""
    return TtsChunk(np.arange(samples.start, samples.stop, dtype=np.float32), sentence, list(words))


def test_a_request_that_never_fails_is_passed_through():
    r = Resumption(SENTENCES)
    got = [r.delivered(chunk(0, range(0, 100), [("One", 0, 90)])), r.delivered(chunk(1, range(100, 250)))]
    assert [g.sentence_index for g in got] == [0, 1]
    assert got[0].words == [("One", 0, 90)]
    assert np.array_equal(got[1].pcm, np.arange(100, 250))
    assert r.rest == SENTENCES


def test_the_cut_sentence_is_issued_again_and_its_delivered_samples_dropped():
    r = Resumption(SENTENCES)
    r.delivered(chunk(0, range(0, 100)))  # "One." whole
    r.delivered(chunk(1, range(0, 40), [("Two", 0, 60), ("two", 70, 140)]))  # "Two two." cut after 40 samples
    assert r.failed(GONE, now=0.0, within_s=10) == RETRY_S
    assert r.rest == SENTENCES[1:]
    # The request issued again counts from "Two two.": its first 40 samples were heard.
    assert r.delivered(chunk(0, range(0, 30), [("Two", 0, 60), ("two", 70, 140)])) is None
    again = r.delivered(chunk(0, range(30, 150), [("Two", 0, 60), ("two", 70, 140)]))
    assert np.array_equal(again.pcm, np.arange(40, 150))  # the sentence goes on from its 41st sample
    assert again.sentence_index == 1 and again.words == []  # its words were told with its first chunk
    # Word samples count from the request issued (150 of "Two two." first), and come out
    # counted from the whole request (100 of "One." first).
    third = r.delivered(chunk(1, range(0, 200), [("Three", 160, 200)]))
    assert third.sentence_index == 2 and third.words == [("Three", 260, 300)]


def test_a_failure_at_a_sentence_boundary_drops_nothing_and_keeps_the_words():
    r = Resumption(SENTENCES)
    r.delivered(chunk(0, range(0, 100)))
    r.failed(GONE, now=0.0, within_s=10)
    # "One." was whole when the request failed (nothing of "Two two." yet): it is issued again and dropped.
    assert r.rest == SENTENCES
    assert r.delivered(chunk(0, range(0, 100))) is None
    two = r.delivered(chunk(1, range(0, 50), [("Two", 105, 145)]))
    assert two.sentence_index == 1 and two.words == [("Two", 105, 145)]
    assert np.array_equal(two.pcm, np.arange(0, 50))


def test_a_request_paused_before_a_sentence_goes_on_from_it_and_nothing_is_made_twice():
    r = Resumption(SENTENCES)
    r.delivered(chunk(0, range(0, 100)))
    r.delivered(chunk(1, range(0, 80), [("Two", 0, 60)]))  # "Two two." whole; "Three..."'s first chunk was not sent
    r.paused_before(2)
    assert r.rest == SENTENCES[2:]
    three = r.delivered(chunk(0, range(0, 50), [("Three", 10, 50)]))
    assert three.sentence_index == 2 and three.words == [("Three", 190, 230)]  # after 100 + 80 samples
    assert np.array_equal(three.pcm, np.arange(0, 50))  # none of it dropped


def test_only_a_server_or_stage_gone_away_under_a_stream_already_heard_is_resumed():
    r = Resumption(SENTENCES, mid_stream=True)
    assert r.failed(REFUSED, now=0.0, within_s=10) is None  # Triton refused: the failure stands
    assert r.failed(GONE, now=0.0, within_s=0) is None  # resuming is off
    # A new stream that finds no server up fails at once: its client may go to another gateway.
    assert Resumption(SENTENCES).failed(GONE, now=0.0, within_s=10, served=False) is None
    # One whose server went away while its first audio was being made waits for one.
    assert Resumption(SENTENCES).failed(GONE, now=0.0, within_s=10) == RETRY_S
    assert r.failed(GONE, now=0.0, within_s=10) == RETRY_S


def test_during_an_outage_any_failure_is_retried_until_the_bound():
    r = Resumption(SENTENCES, mid_stream=True)
    waits = [r.failed(GONE, now=0.0, within_s=3)]
    # The model reloading refuses requests (synthesis_failed) until it serves again.
    waits += [r.failed(REFUSED, now=t, within_s=3) for t in (0.3, 0.8, 1.5, 2.6)]
    assert waits == [RETRY_S, 2 * RETRY_S, 3 * RETRY_S, RETRY_MAX_S, pytest.approx(0.4)]  # the last: up to the bound
    assert r.failed(GONE, now=3.0, within_s=3) is None


def test_audio_ends_an_outage_and_a_later_one_gets_its_own_bound():
    r = Resumption(SENTENCES, mid_stream=True)
    r.failed(GONE, now=0.0, within_s=3)
    r.delivered(chunk(0, range(0, 100)))
    assert r.attempts == 0
    assert r.failed(REFUSED, now=50.0, within_s=3) is None  # a new outage starts only from going away
    assert r.failed(GONE, now=50.0, within_s=3) == RETRY_S
    assert r.failed(GONE, now=52.9, within_s=3) == pytest.approx(0.1)
