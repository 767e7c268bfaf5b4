"""perf/tools/host_load.py: the client's stalls measured from inside, and other processes'
load from a session of their own. Real processes: one stopped by pid with SIGSTOP, the
load's processes found and counted by their session."""

import os
import signal
import subprocess
import sys
import time

import psutil

from perf.tools.host_load import other_load
from tests.voices import ROOT

STALLED = """
import time
from perf.tools.host_load import ClientStalls
with ClientStalls() as stalls:
    print("ticking", flush=True)
    time.sleep(1.5)
print(stalls.longest_s, flush=True)
"""


def test_a_client_that_could_not_run_reports_its_longest_stall():
    client = subprocess.Popen([sys.executable, "-c", STALLED], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "ticking"
        os.kill(client.pid, signal.SIGSTOP)  # the process cannot run, as when the scheduler leaves it out
        time.sleep(0.5)
        os.kill(client.pid, signal.SIGCONT)
        longest = float(client.stdout.readline())
    finally:
        client.kill()
        client.wait()
    assert longest >= 0.45


def _session(sid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return found


def test_other_load_runs_its_processes_busy_in_a_session_of_their_own_and_leaves_none():
    with other_load(3) as sid:
        assert sid != os.getsid(0)
        deadline = time.monotonic() + 10
        while len(_session(sid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        spinning = _session(sid)
        assert len(spinning) == 3
        busy = [p.cpu_times().user for p in spinning]
        time.sleep(0.5)
        assert all(p.cpu_times().user > before for p, before in zip(spinning, busy))
    time.sleep(0.2)
    assert _session(sid) == []
