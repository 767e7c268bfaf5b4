"""The embedded chat model's conversion from GGUF (python_backends.thinker.gguf_model),
checked in the vLLM environment by tests/chat_model_check.py: by its logits against a
forward pass written from the GGUF as llama.cpp reads it, not by its shapes."""


import pytest

from tests.voices import ROOT, ar_check


@pytest.fixture(scope="module")
def check():
    return ar_check("chat_model_check.py", timeout=600, env={"PYTHONPATH": str(ROOT)})


def test_the_converted_model_computes_the_ggufs_logits(check):
    assert check["max_abs_diff"] < 1e-3 * check["logit_scale"]
    assert check["same_argmax"]


def test_rows_left_in_llama_cpps_order_would_be_caught(check):
    assert check["control_max_abs_diff"] > 100 * max(check["max_abs_diff"], 1e-4)


def test_the_tokenizer_reads_chatml_and_splits_digits_as_llama_cpp(check):
    assert check["starts"] == ["<|im_start|>", "system", "Ċ"]
    assert check["digits"] == ["2", "0", "2", "4"]
    assert check["round_trip"] and check["eos"] == "<|im_end|>"


def test_the_model_answers_a_question_greedily(check):
    assert "Paris" in check["reply"]
