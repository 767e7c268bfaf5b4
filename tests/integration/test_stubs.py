"""A real child process as python_backends.stubs reads it from /proc: alive, stopped,
then a zombie whose command line is gone, then reaped."""

import os
import signal
import subprocess
import sys
import time

from python_backends.stubs import FAULT_STATES, children, model_of


def state_becomes(pid: int, state: str, limit_s: float = 5.0) -> bool:
    deadline = time.monotonic() + limit_s
    while children(os.getpid())[pid][0] != state and time.monotonic() < deadline:
        time.sleep(0.01)
    return children(os.getpid())[pid][0] == state


def test_children_are_read_with_their_state_and_command_line():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "/models/vocoder/1/model.py"])
    try:
        state, args = children(os.getpid())[child.pid]
        # Alive: running, sleeping, or (on a cold disk, as CI's fresh machine had) in disk sleep.
        assert state not in FAULT_STATES and model_of(args) == "vocoder"
        child.send_signal(signal.SIGSTOP)
        assert state_becomes(child.pid, "T")
        child.kill()
        assert state_becomes(child.pid, "Z")
        assert children(os.getpid())[child.pid] == ("Z", [""])  # a zombie's command line is gone
    finally:
        child.kill()
        child.wait()
    assert child.pid not in children(os.getpid())
