import random

from contract.text import Sentence, split_sentences
from gateway.conversation.segmenter import Segmenter, batches
from perf.tools.workloads import workload


def texts(sentences: list[Sentence]) -> list[str]:
    return [s.text for s in sentences]


def test_a_sentence_is_released_once_its_end_is_certain():
    s = Segmenter()
    assert s.append("Hello th") == []
    assert s.append("ere.") == []  # "there.3" or "there.com" could follow
    assert texts(s.append(" ")) == ["Hello there."]
    assert s.append("How are") == []
    assert texts(s.flush()) == ["How are"]
    assert s.pending == ""


def test_with_first_phrase_the_text_is_first_released_at_its_first_clause_break():
    s = Segmenter(first_phrase=True)
    assert s.append("Hi, there") == []  # "Hi" is too short to go alone
    assert texts(s.append(", how")) == ["Hi, there,"]
    assert s.append(" are you, my") == []  # after the first phrase, whole sentences only
    assert texts(s.append(" friend? I")) == ["how are you, my friend?"]
    assert [(x.start, x.end) for x in s.flush()] == [(35, 36)]  # spans count from the start of all the text


def test_a_number_or_a_time_is_no_clause_break():
    s = Segmenter(first_phrase=True)
    assert s.append("It costs 1,000 dollars at 3:30") == []
    assert texts(s.flush()) == ["It costs 1,000 dollars at 3:30"]
    assert Segmenter().append("Well, then") == []  # without first_phrase, sentences only


def test_abbreviations_and_decimals_wait_for_more_text():
    s = Segmenter()
    assert s.append("Dr. ") == []
    assert s.append("Smith paid 3.") == []
    assert texts(s.append("50 dollars. Then")) == ["Dr. Smith paid 3.50 dollars."]


def test_the_next_sentence_starting_completes_the_previous_one():
    s = Segmenter()
    assert s.append("One.") == []
    assert texts(s.append(" Two")) == ["One."]


def test_long_unpunctuated_text_is_released_in_bounded_pieces():
    s = Segmenter(max_sentence_chars=50)
    out = []
    for _ in range(40):
        out += texts(s.append("word "))
    assert out and all(len(x) <= 50 for x in out)
    assert " ".join(out + texts(s.flush())) == " ".join(["word"] * 40)


def test_deltas_give_the_same_sentences_and_spans_as_the_whole_text():
    text = workload("paragraph") + " Dr. Jones, e.g. at 3.30 p.m., said: \"Go!\" Then he left..."
    rng = random.Random(7)
    s, out, i = Segmenter(), [], 0
    while i < len(text):
        n = rng.randint(3, 10)
        out += s.append(text[i : i + n])
        i += n
    out += s.flush()
    assert out == split_sentences(text)
    assert all(text[x.start : x.end] == x.text for x in out)


def test_spans_count_from_the_start_of_everything_appended_across_flushes():
    s = Segmenter()
    first = s.append("  Hello there. ") + s.flush()
    second = s.append("How are you?") + s.flush()
    whole = "  Hello there. How are you?"
    assert [(x.start, x.end) for x in first + second] == [(2, 14), (15, 27)]
    assert [whole[x.start : x.end] for x in first + second] == ["Hello there.", "How are you?"]


def test_batches_are_consecutive_whole_sentences_within_the_limit():
    sentences = [Sentence(0, n, "x" * n) for n in (10, 10, 10, 50, 5)]
    assert [[len(s.text) for s in b] for b in batches(sentences, 25)] == [[10, 10], [10], [50], [5]]
    assert list(batches([], 25)) == []
