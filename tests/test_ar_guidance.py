"""Classifier-free guidance across a pair of Talker sequences
(python_backends/ar/guidance.py): combined only in lock-step, scale 1 is conditional."""

import numpy as np

from python_backends.ar.guidance import Role, Row, apply, guide, plan

C, U = Role.CONDITIONAL, Role.UNCONDITIONAL


def test_pairs_in_lock_step_are_combined_and_the_others_reported():
    rows = [
        Row(0, "a", C, 5, 2.0), Row(3, "a", U, 5, 2.0),  # in step
        Row(1, "b", C, 6, 1.5), Row(2, "b", U, 5, 1.5),  # the unconditional row joined a step late
        Row(4, "c", C, 0, 3.0),  # its unconditional row is not in this batch
    ]
    result = plan(rows)
    assert result.pairs == ((0, 3, 2.0),)
    assert sorted(result.out_of_step) == ["b", "c"]


def test_guidance_moves_away_from_the_unconditional_and_scale_1_is_conditional():
    rng = np.random.default_rng(0)
    c, u = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    assert guide(c, u, 1.0) is c
    np.testing.assert_allclose(guide(c, u, 3.0), u + 3 * (c - u), rtol=1e-6)
    assert np.argmax(guide(c, u, 0.0)) == np.argmax(u)


def test_both_rows_of_a_pair_get_the_same_logits_so_they_sample_alike():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((4, 16)).astype(np.float32)
    before = logits.copy()
    apply(logits, [(0, 2, 2.5)])
    assert np.array_equal(logits[0], logits[2])
    np.testing.assert_allclose(logits[0], before[2] + 2.5 * (before[0] - before[2]), rtol=1e-6)
    assert np.array_equal(logits[[1, 3]], before[[1, 3]])  # other requests untouched
