"""The stages' two priorities (python_backends.priority): real threads, real nice values."""

import os
import threading

from python_backends.priority import BACKGROUND_NICE, pools


def nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_calls_that_are_not_urgent_run_background_nice_below_the_process_and_urgent_ones_at_it():
    own = nice()
    workers = pools(2, "stage")
    try:
        urgent = {workers[True].submit(nice).result() for _ in range(4)}
        background = {workers[False].submit(nice).result() for _ in range(4)}
    finally:
        for pool in workers.values():
            pool.shutdown()
    assert urgent == {own} and background == {min(own + BACKGROUND_NICE, 19)}
    assert nice() == own  # the caller's thread keeps its own
