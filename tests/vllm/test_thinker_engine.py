"""The Thinker's CPU engine, llama.cpp on the embedded model's GGUF (python_backends.
thinker.llama_engine), checked in the vLLM environment by tests/thinker_engine_check.py:
what speculation needs of it (a draft verified by the argmax at each of its positions, a
reply gone on after a prefix) and what its batching must not change."""


import pytest

from tests.voices import ROOT, ar_check


@pytest.fixture(scope="module")
def check():
    return ar_check("thinker_engine_check.py", timeout=600, env={"PYTHONPATH": str(ROOT)})


def test_the_model_answers_greedily_and_ends_its_reply(check):
    assert "Paris" in check["replies"][0]
    assert check["end_token"] == "<|im_end|>"


def test_replies_batched_beyond_the_slots_are_the_replies_written_alone(check):
    assert check["batched_as_alone"]


def test_a_draft_for_a_shorter_question_is_cut_where_the_model_disagrees_and_the_reply_is_unchanged(check):
    assert check["verified_is_reply"]
    assert 0 <= check["verified_accepted"] < check["draft"]


def test_a_draft_that_is_the_replys_start_is_kept_whole(check):
    assert check["exact_is_reply"] and check["exact_accepted"] == 6
    assert check["verifications"] == 2


def test_a_reply_after_a_prefix_is_the_rest_of_the_reply(check):
    assert check["after_prefix_is_rest"]


def test_a_reply_left_early_is_dropped_and_writes_nothing_more(check):
    assert check["running_after_drop"] == 0
    assert check["written_after_drop"] == 0


def test_a_reply_drawn_with_a_seed_is_drawn_again_the_same(check):
    assert check["same_seed_same_reply"]
    assert check["other_seed_other_reply"]
