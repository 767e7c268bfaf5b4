import random

from gateway.segmenter import Segmenter
from perf.workloads import workload
from python_backends.text import split_sentences


def test_a_sentence_is_released_once_its_end_is_certain():
    s = Segmenter()
    assert s.append("Hello th") == []
    assert s.append("ere.") == []  # "there.3" or "there.com" could follow
    assert s.append(" ") == ["Hello there."]
    assert s.append("How are") == []
    assert s.flush() == ["How are"]
    assert s.pending == ""


def test_abbreviations_and_decimals_wait_for_more_text():
    s = Segmenter()
    assert s.append("Dr. ") == []
    assert s.append("Smith paid 3.") == []
    assert s.append("50 dollars. Then") == ["Dr. Smith paid 3.50 dollars."]


def test_the_next_sentence_starting_completes_the_previous_one():
    s = Segmenter()
    assert s.append("One.") == []
    assert s.append(" Two") == ["One."]


def test_long_unpunctuated_text_is_released_in_bounded_pieces():
    s = Segmenter(max_sentence_chars=50)
    out = []
    for _ in range(40):
        out += s.append("word ")
    assert out and all(len(x) <= 50 for x in out)
    assert " ".join(out + s.flush()) == " ".join(["word"] * 40)


def test_deltas_give_the_same_sentences_as_the_whole_text():
    text = workload("paragraph") + " Dr. Jones, e.g. at 3.30 p.m., said: \"Go!\" Then he left..."
    rng = random.Random(7)
    s, out, i = Segmenter(), [], 0
    while i < len(text):
        n = rng.randint(3, 10)
        out += s.append(text[i : i + n])
        i += n
    out += s.flush()
    assert out == [x.text for x in split_sentences(text)]
