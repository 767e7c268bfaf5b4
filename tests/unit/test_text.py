import pytest

from contract.text import normalize, split_sentences


def texts(text, **kw):
    return [s.text for s in split_sentences(text, **kw)]


def test_splits_at_sentence_ends():
    assert texts("Hello there. How are you? Fine! Wait… Bye.") == [
        "Hello there.", "How are you?", "Fine!", "Wait… Bye."]  # an ellipsis may go on: pysbd keeps it


# Hard cases, one sentence or two, by pysbd's rules for the language.
@pytest.mark.parametrize("language,text,expected", [
    ("en", "Dr. Smith met J. R. Tolkien in the U.S. in 1950. It cost 3.50 dollars, e.g. a lot.",
     ["Dr. Smith met J. R. Tolkien in the U.S. in 1950.", "It cost 3.50 dollars, e.g. a lot."]),
    ("en", "We met on Jan. 5th in the city. See Fig. 3 and Sept. 21st, then Dec. 1.",
     ["We met on Jan. 5th in the city.", "See Fig. 3 and Sept. 21st, then Dec. 1."]),
    ("en", "Mr. and Mrs. Jones went to St. Louis. They liked it.",
     ["Mr. and Mrs. Jones went to St. Louis.", "They liked it."]),
    ("en", "The meeting is at 5 p.m. tomorrow. Be there.", ["The meeting is at 5 p.m. tomorrow.", "Be there."]),
    ("en", "He came 1st. She came 2nd.", ["He came 1st.", "She came 2nd."]),
    ("en", "It costs $3.50 or 2.5 million. Pay now.", ["It costs $3.50 or 2.5 million.", "Pay now."]),
    ("en", "J. R. R. Tolkien wrote it. It sold well.", ["J. R. R. Tolkien wrote it.", "It sold well."]),
    ("en", "“Go now!” he said. She went.", ["“Go now!” he said.", "She went."]),
    ("de", "Am 3. Oktober ist Feiertag. Das ist z. B. gut. Herr Dr. Müller kommt.",
     ["Am 3. Oktober ist Feiertag.", "Das ist z. B. gut.", "Herr Dr. Müller kommt."]),
    ("de", "Er wurde am 1. Mai geboren. Sie kam usw. erst später.",
     ["Er wurde am 1. Mai geboren.", "Sie kam usw. erst später."]),
])
def test_hard_cases_keep_abbreviations_initials_decimals_and_ordinals_in_their_sentence(language, text, expected):
    assert texts(text, language=language) == expected


def test_a_language_without_rules_of_its_own_is_cut_by_english_rules():
    assert texts("Dr. Who came. He left.", language="xx") == ["Dr. Who came.", "He left."]


def test_no_split_before_lower_case():
    assert texts("He said wait... and then left.") == ["He said wait... and then left."]


def test_closing_quotes_stay_with_their_sentence():
    assert texts('She said "Go." Then she left.') == ['She said "Go."', "Then she left."]


def test_newlines_end_sentences_and_blank_ones_vanish():
    assert texts("First line\n\nsecond line\n  \n") == ["First line", "second line"]


def test_spans_point_into_the_original_text():
    text = "  One two.   Three four!  "
    for s in split_sentences(text):
        assert text[s.start : s.end] == s.text


def test_long_unpunctuated_text_is_cut_at_spaces_within_the_limit():
    text = " ".join(["word"] * 400)
    pieces = split_sentences(text, max_chars=100)
    assert all(len(p.text) <= 100 for p in pieces)
    assert " ".join(p.text for p in pieces) == text
    assert all(not p.text.startswith(" ") and p.text.split(" ")[0] == "word" for p in pieces)


def test_long_sentences_prefer_clause_breaks():
    text = "a" * 10 + " " + "b" * 50 + ", " + "c" * 60 + "."
    pieces = texts(text, max_chars=100)
    assert pieces[0].endswith(",") and len(pieces) == 2


def test_a_word_longer_than_the_limit_is_cut_hard():
    pieces = texts("x" * 250, max_chars=100)
    assert [len(p) for p in pieces] == [100, 100, 50]


def test_normalize_reads_money_numbers_and_symbols():
    assert normalize("$5") == "5 dollars"
    assert normalize("$1") == "1 dollar"
    assert normalize("$3.50 each") == "3 dollars and 50 cents each"
    assert normalize("€2.5 million") == "2.5 million euros"
    assert normalize("£1.01") == "1 pound and 1 penny"
    assert normalize("#1 hit") == "number 1 hit"
    assert normalize("salt & pepper") == "salt and pepper"


def test_normalize_removes_control_characters_and_keeps_other_text():
    assert normalize("tab\there\x00now\x1b ok") == "tab here now ok"
    assert normalize("It's 42% off at 10:30.") == "It's 42% off at 10:30."
