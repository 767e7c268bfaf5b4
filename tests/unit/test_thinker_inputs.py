"""The `thinker` model's requests: as the gateway writes them (gateway/backends/thinking.py) and as
the model reads them (python_backends/thinker/inputs.py), without a model."""

import json

import numpy as np
import pytest

from contract import models as c
from gateway.backends.thinking import thinker_request
from python_backends.thinker.inputs import read_thinker_request

MESSAGES = [{"role": "user", "content": "Hi."}]
VOCABULARY = 100


def inputs(**tokens) -> dict[str, np.ndarray]:
    return {c.MESSAGES: np.array([json.dumps(MESSAGES).encode()], dtype=object), c.MAX_TOKENS: np.array([8], np.int32),
            **{name: np.array(ids, np.int32) for name, ids in tokens.items()}}


def test_a_prefix_is_read_as_the_replys_decided_start():
    ask = read_thinker_request(inputs(PREFIX=[5, 6, 7]), VOCABULARY)
    assert ask.prefix == (5, 6, 7) and ask.draft == () and ask.max_tokens == 8


@pytest.mark.parametrize("tokens", [
    {"PREFIX": [5], "DRAFT": [6]},  # a reply verifies a draft or goes on after a prefix
    {"PREFIX": [5, VOCABULARY]},  # outside the vocabulary
    {"PREFIX": list(range(8))},  # leaves no room in MAX_TOKENS
])
def test_a_bad_prefix_is_refused(tokens):
    with pytest.raises(c.InvalidRequest):
        read_thinker_request(inputs(**tokens), VOCABULARY)


def test_the_gateway_sends_a_prefix_only_when_it_has_one():
    names = [i.name() for i in thinker_request(MESSAGES, (), 1, 64, 0.0, prefix=(5, 6))["inputs"]]
    assert c.PREFIX in names and c.DRAFT not in names
    assert c.PREFIX not in [i.name() for i in thinker_request(MESSAGES, (1,), 1, 64, 0.0)["inputs"]]
