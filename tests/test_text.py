from python_backends.text import normalize, split_sentences


def texts(text, **kw):
    return [s.text for s in split_sentences(text, **kw)]


def test_splits_at_sentence_ends():
    assert texts("Hello there. How are you? Fine! Good…  Bye.") == [
        "Hello there.", "How are you?", "Fine!", "Good…", "Bye."]


def test_keeps_abbreviations_initials_acronyms_and_decimals_together():
    text = "Dr. Smith met J. R. Tolkien in the U.S. in 1950. It cost 3.50 dollars, e.g. a lot."
    assert texts(text) == ["Dr. Smith met J. R. Tolkien in the U.S. in 1950.", "It cost 3.50 dollars, e.g. a lot."]


def test_month_abbreviations_do_not_end_a_sentence():
    assert texts("We met on Jan. 5th in the city. See Fig. 3 and Sept. 21st, then Dec. 1.") == [
        "We met on Jan. 5th in the city.", "See Fig. 3 and Sept. 21st, then Dec. 1."]


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
