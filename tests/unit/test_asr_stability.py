"""Which words of a recognizer's passes are shown as partials (python_backends.asr.stability):
LocalAgreement-2 holding its last word back, never taking a shown word back."""

from python_backends.asr.stability import Agreement, agreed, spoken


def test_words_compare_as_they_sound():
    assert spoken(["What's", "music?", "Hello,"]) == ["what's", "music", "hello"]
    assert agreed("What is your favorite?".split(), "what is your favorite kind".split()) == 4
    assert agreed("a b c".split(), "a x c".split()) == 1


def test_a_partial_is_what_two_passes_in_a_row_agree_on_but_its_last_word():
    agreement = Agreement()
    assert agreement.hypothesis("What is") is None  # nothing to agree with yet
    assert agreement.hypothesis("What is your fa") == "What"
    assert agreement.hypothesis("What is your favorite") == "What is"
    assert agreement.hypothesis("What is your favorite kind") == "What is your"


def test_a_word_both_passes_heard_half_of_is_held_back():
    agreement = Agreement()
    agreement.hypothesis("If you were in power")
    assert agreement.hypothesis("If you were in power for") == "If you were in"
    assert agreement.hypothesis("If you were in part four a day") is None
    assert agreement.hypothesis("If you were in part four a day how") == "If you were in part four a"


def test_nothing_new_no_partial():
    agreement = Agreement()
    agreement.hypothesis("What is it")
    assert agreement.hypothesis("What is it") == "What is"
    assert agreement.hypothesis("What is it") is None


def test_a_shown_word_is_never_taken_back():
    agreement = Agreement()
    agreement.hypothesis("birch canoe slid on")
    assert agreement.hypothesis("birch canoe slid on") == "birch canoe slid"
    assert agreement.hypothesis("birch can use lid on the") is None  # the passes disagree with what was shown
    assert agreement.hypothesis("birch can use lid on the smooth") is None
    assert agreement.hypothesis("birch canoe slid on the smooth planks") is None  # agrees with the shown, not the last pass
    assert agreement.hypothesis("birch canoe slid on the smooth planks.") == "birch canoe slid on the smooth"


def test_the_latest_pass_spells_the_words():
    agreement = Agreement()
    agreement.hypothesis("what is your")
    assert agreement.hypothesis("What is your music") == "What is"


def test_a_settled_pass_is_shown_whole_if_it_goes_on_from_the_partial():
    agreement = Agreement()
    agreement.hypothesis("what is your")
    agreement.hypothesis("what is your")
    assert agreement.settled("What is your favorite kind of music?") == "What is your favorite kind of music?"
    other = Agreement()
    other.hypothesis("what is your")
    other.hypothesis("what is your")
    assert other.settled("Which is your favorite?") is None  # it would take back "what": the final says it
