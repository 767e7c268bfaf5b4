import numpy as np
import pytest

from python_backends.piper.timing import (
    align,
    spoken_words,
    stretch_durations,
    text_words,
    word_timings,
)

SEP = {1, 2, 3}  # BOS, EOS, space
PAD = 0


def test_spoken_words_are_runs_between_separators():
    ids = [1, 0, 10, 0, 11, 0, 3, 0, 12, 0, 2]
    durations = [1, 1, 2, 1, 2, 1, 3, 1, 4, 1, 5]
    # frames: ^0-1 _1-2 a2-4 _4-5 b5-7 _7-8 " "8-11 _11-12 c12-16 _16-17 $17-22
    assert spoken_words(ids, durations, SEP, PAD) == [(2, 8), (12, 17)]


def test_text_words_skip_punctuation_only_tokens():
    assert [m.group() for m in text_words("Hello — world, 42 & $5!")] == ["Hello", "world,", "42", "$5!"]


def test_equal_counts_map_one_to_one():
    assert align([5, 3], [(1, 7), (10, 15)]) == [(1, 7), (10, 15)]


def test_unequal_counts_spread_over_spoken_time_monotonically():
    spoken = [(0, 10), (12, 20), (25, 40)]
    timings = align([2, 2], spoken)
    assert timings[0][0] == 0 and timings[-1][1] == 40
    flat = [t for pair in timings for t in pair]
    assert flat == sorted(flat)


def test_every_word_gets_a_timing():
    timings = word_timings("Say 42 now.", [1, 0, 9, 0, 3, 0, 9, 0, 3, 0, 9, 0, 3, 0, 9, 0, 2], [1] * 17, SEP, PAD)
    assert [w for w, _, _ in timings] == ["Say", "42", "now."]
    assert all(a < b for _, a, b in timings)


def test_unstretched_durations_are_piper_s_own():
    durations = np.array([1, 3, 2, 7], dtype=np.int32)
    assert stretch_durations(durations, 1.0) is durations


@pytest.mark.parametrize("ratio", [0.25, 1 / 3, 0.5, 1.5, 2.0, 4.0])
def test_stretched_durations_total_the_stretched_length_to_a_frame(ratio):
    durations = np.random.default_rng(0).integers(1, 9, size=60).astype(np.int32)
    stretched = stretch_durations(durations, ratio)
    assert stretched.dtype == np.int32 and stretched.size == durations.size and (stretched >= 0).all()
    assert abs(stretched.sum() - durations.sum() * ratio) <= 0.5
    # Every boundary moves with the stretch: no phoneme drifts by more than a frame.
    assert np.abs(np.cumsum(stretched) - np.cumsum(durations) * ratio).max() <= 0.5


def test_a_short_phoneme_sped_up_may_get_no_frame_but_the_sentence_keeps_one():
    assert stretch_durations(np.array([1, 1, 1], dtype=np.int32), 0.25).tolist() == [0, 0, 1]
