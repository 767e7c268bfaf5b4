"""serving.BatchedModel in process (Triton's pb_utils stubbed): a batch runs once per
key, and each request is answered from its own row."""

import importlib
import sys
import unittest.mock

import numpy as np
import pytest


@pytest.fixture
def serving(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", unittest.mock.MagicMock())
    monkeypatch.delitem(sys.modules, "python_backends.serving", raising=False)
    yield importlib.import_module("python_backends.serving")
    sys.modules.pop("python_backends.serving", None)  # bound to the stub: not for other tests


def test_a_batch_runs_once_per_key_and_answers_each_request_from_its_row(serving):
    runs = []

    class Doubler(serving.BatchedModel):
        model = "doubler"

        def window(self, request):
            key, value = request
            return key, np.array([[value]])

        def run(self, key, windows):
            runs.append((key, len(windows)))
            return None if key == "refused" else 2 * np.concatenate(windows)

        def answer(self, key, row):
            return (key, None if row is None else row.tolist())

    answers = Doubler().execute([("a", 1), ("b", 2), ("a", 3), ("refused", 4), ("b", 5)])
    assert runs == [("a", 2), ("b", 2), ("refused", 1)]
    assert answers == [("a", [[2]]), ("b", [[4]]), ("a", [[6]]), ("refused", None), ("b", [[10]])]
