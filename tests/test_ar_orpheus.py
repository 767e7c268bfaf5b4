"""The Orpheus format (python_backends/ar/orpheus.py): SNAC's codebooks from 7-code
frames as Orpheus's decoder reads them, the prompt, and the frame budget."""

import numpy as np

from python_backends.ar.orpheus import OrpheusTokens, frame_budget, snac_codes


def test_frames_map_onto_snacs_three_codebooks_as_orpheus_reads_them():
    frames = np.arange(2 * 7).reshape(2, 7)  # frame f, position p holds 7f + p
    a, b, c = snac_codes(frames)
    # orpheus_tts: codes_0 ← i; codes_1 ← i+1, i+4; codes_2 ← i+2, i+3, i+5, i+6 (i = 7·frame)
    assert a.tolist() == [0, 7]
    assert b.tolist() == [1, 4, 8, 11]
    assert c.tolist() == [2, 3, 5, 6, 9, 10, 12, 13]


def test_the_prompt_is_orpheus_human_turn_then_the_start_of_speech():
    tokens = OrpheusTokens(base=128256, eot=128009)
    assert tokens.prompt([128000, 42]) == [128259, 128000, 42, 128009, 128260, 128261, 128257]
    assert (tokens.codec.first_code_token, tokens.codec.end_token) == (128266, 128258)


def test_the_frame_budget_follows_the_text_and_never_exceeds_max_frames():
    assert frame_budget("Hi.", 1200) == 12 + 2 * 3
    assert frame_budget("x" * 1000, 1200) == 1200
    assert frame_budget("A longer sentence.", 5) == 5
