"""The Orpheus format (python_backends/ar/orpheus.py): the prompt and the frame budget
(SNAC's codebooks from 7-code frames: tests/vllm/test_ar_code2wav.py)."""

from python_backends.ar.orpheus import OrpheusTokens, frame_budget


def test_the_prompt_is_orpheus_human_turn_then_the_start_of_speech():
    tokens = OrpheusTokens(base=128256, eot=128009)
    assert tokens.prompt([128000, 42]) == [128259, 128000, 42, 128009, 128260, 128261, 128257]
    assert (tokens.codec.first_code_token, tokens.codec.end_token) == (128266, 128258)


def test_the_frame_budget_follows_the_text_and_never_exceeds_max_frames():
    assert frame_budget("Hi.", 1200) == 12 + 2 * 3
    assert frame_budget("x" * 1000, 1200) == 1200
    assert frame_budget("A longer sentence.", 5) == 5
