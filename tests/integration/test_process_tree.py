"""Killing what is left of Triton's processes, on real processes: a parent that does
not reap its killed child stands in for tritonserver and a retired stub."""

import subprocess
import sys
import time

import psutil

from operations.process_tree import alive, kill_all

# Starts a child that sleeps, prints its pid, then sleeps without ever reaping it.
UNREAPING_PARENT = ("import subprocess, sys, time; "
                    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                    "print(child.pid, flush=True); time.sleep(60)")


def test_kill_all_takes_a_zombie_for_dead_instead_of_waiting_for_its_parent():
    # The supervisor kills a reloaded model's old stubs this way; tritonserver reaped
    # them late, and the 10 s it then waited were 10 s in which it saw no new fault.
    parent = subprocess.Popen([sys.executable, "-c", UNREAPING_PARENT], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        started = time.monotonic()
        kill_all([child], timeout=30)
        assert time.monotonic() - started < 10  # it returned on the zombie, not at its timeout
        assert child.status() == psutil.STATUS_ZOMBIE and not alive(child)
    finally:
        parent.kill()
        parent.wait()


def test_kill_all_reaps_its_own_children():
    child = psutil.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    kill_all([child])
    assert not psutil.pid_exists(child.pid)  # reaped here: no zombie left behind
