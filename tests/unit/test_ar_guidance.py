"""Classifier-free guidance across a pair of Talker sequences
(python_backends/ar/guidance.py): admitted together, combined only in lock-step, scale 1
is conditional, a pair out of step found."""

import numpy as np

from python_backends.ar.guidance import (
    PairGate,
    Role,
    Row,
    apply,
    diverged_at,
    guide,
    plan,
)

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
    assert result.to_end == (2,)  # b's unconditional row; c has none in the batch


def test_a_pair_waits_for_both_requests_and_for_room_for_both():
    gate = PairGate()
    gate.arrive("a", "a-cond")
    assert gate.release(room=8) == []  # the unconditional request has not arrived yet
    gate.arrive("b", "b-cond")
    gate.arrive("b", "b-uncond")
    gate.arrive("a", "a-uncond")
    assert gate.release(room=1) == []  # one place would split a pair across steps
    assert gate.release(room=3) == ["b-cond", "b-uncond"]  # whole pairs, in the order they completed
    assert gate.release(room=2) == ["a-cond", "a-uncond"]
    assert gate.release(room=8) == []


def test_a_request_aborted_while_held_is_dropped_and_its_partner_goes_alone():
    gate = PairGate()
    gate.arrive("a", "a-cond")
    gate.forget(["a-cond"])
    gate.arrive("a", "a-uncond")  # a first arrival again: waits, and is never let in alone
    assert gate.release(room=8) == []
    gate.arrive("b", "b-cond")
    gate.arrive("b", "b-uncond")
    gate.forget(["b-uncond"])
    assert gate.release(room=1) == ["b-cond"]


def test_the_first_token_a_pair_went_apart_at():
    assert diverged_at([5, 6, 7, 2], [5, 6, 7, 2]) is None
    assert diverged_at([5, 6, 7, 2], [5, 6, 9, 2]) == 2
    assert diverged_at([5, 6, 7, 2], [5, 6]) == 2  # the unconditional row was ended early
    assert diverged_at([], []) is None


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
