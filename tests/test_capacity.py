"""The capacity a BLS model measures and says at the end of every stream."""

import numpy as np
import pytest

from contract import models as c
from python_backends.capacity import CAPACITY_WINDOW_S, CapacityMeter, capacity_outputs


def test_capacity_is_the_slots_times_audio_per_busy_second_of_the_recent_past():
    now = [0.0]
    meter = CapacityMeter(slots=2, now=lambda: now[0])
    assert meter.streams == 0.0  # nothing measured yet
    meter.worked(1.0)
    meter.made(5.0)  # 5 s of audio per slot-second, on 2 slots
    assert meter.streams == pytest.approx(10.0)
    now[0] += 10 * CAPACITY_WINDOW_S  # the cores slowed down since: the recent past counts
    meter.worked(2.0)
    meter.made(2.0)
    assert meter.streams == pytest.approx(2.0, rel=0.01)


def test_a_batched_engine_is_busy_while_any_stream_is_open():
    now = [0.0]
    meter = CapacityMeter(slots=1, now=lambda: now[0])
    meter.opened()
    meter.opened()  # two streams overlap: the time counts once
    now[0] += 2.0
    meter.made(3.0)
    meter.made(3.0)
    assert meter.streams == pytest.approx(3.0, rel=0.01)  # 6 s of audio in 2 busy seconds
    meter.closed()
    meter.closed()
    now[0] += 5.0  # idle: not busy, so the rate stays
    assert meter.streams == pytest.approx(3.0, rel=0.01)


def test_the_capacity_response_is_declared_by_both_bls_models():
    outputs = capacity_outputs(4.5)
    assert outputs[c.CAPACITY].dtype == np.float32 and outputs[c.CAPACITY].tolist() == [4.5]
    for model in (c.TTS_MODEL, c.TTS_AR_MODEL):
        assert c.CAPACITY in {t["name"] for t in c.model_outputs(model)}
