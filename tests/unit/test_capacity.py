"""The capacity a BLS model measures and says at the end of every stream."""

import numpy as np
import pytest

from contract import models as c
from python_backends.capacity import CAPACITY_DECAY_S, CapacityMeter, capacity_outputs


def test_capacity_is_the_workers_times_audio_per_busy_worker_second_of_the_recent_past():
    now = [0.0]
    meter = CapacityMeter(workers=2, now=lambda: now[0])
    assert meter.capacity == 0.0  # nothing measured yet
    meter.running(1)
    now[0] += 1.0
    meter.running(0)
    meter.made(5.0)  # 5 s of audio in one worker's second, on 2 workers
    assert meter.capacity == pytest.approx(10.0, rel=0.05)
    now[0] += 10 * CAPACITY_DECAY_S  # the cores slowed down since: the recent past counts
    meter.running(2)
    now[0] += 1.0
    meter.running(0)
    meter.made(2.0)
    assert meter.capacity == pytest.approx(2.0, rel=0.01)


def test_calls_past_the_workers_add_no_busy_time():
    """Three calls in flight on two cores: two cores' time, not three, made the audio."""
    now = [0.0]
    meter = CapacityMeter(workers=2, now=lambda: now[0])
    meter.running(3)
    now[0] += 2.0
    meter.made(20.0)
    assert meter.capacity == pytest.approx(10.0, rel=0.01)  # 20 s of audio in 4 worker-seconds, × 2


def test_a_batched_engine_is_busy_while_any_stream_is_open():
    now = [0.0]
    meter = CapacityMeter(workers=1, now=lambda: now[0])
    meter.running(1)
    meter.running(2)  # two streams overlap: the time counts once
    now[0] += 2.0
    meter.made(3.0)
    meter.made(3.0)
    assert meter.capacity == pytest.approx(3.0, rel=0.01)  # 6 s of audio in 2 busy seconds
    meter.running(1)
    meter.running(0)
    now[0] += 5.0  # idle: not busy, so the rate stays
    assert meter.capacity == pytest.approx(3.0, rel=0.01)


def test_the_capacity_response_is_declared_by_both_bls_models():
    outputs = capacity_outputs(4.5)
    assert outputs[c.CAPACITY].dtype == np.float32 and outputs[c.CAPACITY].tolist() == [4.5]
    for model in (c.TTS_MODEL, c.TTS_AR_MODEL):
        assert c.CAPACITY in {t["name"] for t in c.model_outputs(model)}
