"""The word error rate the recognizer's tests and perf/voice/end_to_end.py judge transcripts by (tests/speech.py)."""

import pytest

from tests.speech import word_error_rate, words


def test_words_are_compared_without_case_or_punctuation():
    assert words("What's up, Doc?") == ["what's", "up", "doc"]


@pytest.mark.parametrize("reference, hypothesis, rate", [
    ("What is the capital of France?", "what is the capital of france", 0.0),
    ("What is the capital of France?", "What is the capitol of France?", 1 / 6),  # a substitution
    ("a b c", "a c", 1 / 3),  # a deletion
    ("a b", "a b c d", 1.0),  # two insertions
    ("a b c d", "", 1.0),
])
def test_the_word_error_rate_counts_substitutions_deletions_and_insertions(reference, hypothesis, rate):
    assert word_error_rate(reference, hypothesis) == pytest.approx(rate)
