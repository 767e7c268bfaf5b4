"""PredGen's verification rule (python_backends.thinker.speculation), without a model."""

import pytest

from python_backends.thinker.speculation import Verdict, verify


def test_greedy_keeps_the_draft_up_to_its_first_token_that_is_not_the_argmax():
    best = [[5, 9], [6, 1], [2, 7], [3, 3]]
    assert verify([5, 6, 7, 3], best, 1, after=42) == Verdict(2, 2)  # 7 is second best at position 2: corrected to 2


def test_top_k_keeps_tokens_within_the_best_k_and_corrects_to_the_best():
    best = [[5, 9, 4], [6, 1, 8], [2, 7, 0], [3, 4, 1]]
    assert verify([9, 8, 7, 1], best, 3, after=42) == Verdict(4, 42)
    assert verify([9, 8, 7, 1], best, 2, after=42) == Verdict(1, 6)  # 8 is third at position 1


def test_a_draft_kept_whole_is_followed_by_the_models_next_token():
    assert verify([1, 2], [[1], [2]], 1, after=99) == Verdict(2, 99)


def test_an_empty_draft_keeps_nothing_and_goes_on_with_the_models_next_token():
    assert verify([], [], 1, after=7) == Verdict(0, 7)


def test_a_revised_first_word_rejects_the_whole_draft():
    assert verify([11, 12, 13], [[20], [12], [13]], 1, after=0) == Verdict(0, 20)


def test_a_draft_longer_than_the_reply_is_cut_where_the_model_ends_it():
    end = 2
    best = [[4], [end], [end]]  # the model ends the reply after one token; the draft went on
    assert verify([4, 8, 9], best, 1, after=end) == Verdict(1, end)


def test_a_kept_end_token_ends_the_reply_whatever_the_draft_holds_after_it():
    end = 2
    best = [[4, 8], [5, end], [end, 1], [6, 6]]
    assert verify([4, end, 9, 9], best, 2, after=7, ends={end}) == Verdict(2, None)
    assert verify([4, end], best[:2], 1, after=7, ends={end}) == Verdict(1, 5)  # greedy: the end was not the argmax


def test_rankings_must_match_the_draft_and_k_must_be_positive():
    with pytest.raises(ValueError):
        verify([1, 2], [[1]], 1, after=0)
    with pytest.raises(ValueError):
        verify([1], [[1]], 0, after=0)
