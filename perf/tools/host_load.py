"""The host around a benchmark: other processes loading the cores, and whether the
benchmark's own client got the CPU it needed.

A late first packet seen by a client is the server's only if the client read it when it
came: with autogroup on (Linux's default), processes are scheduled by session first, and
a client that shares its session with CPU-bound processes while Triton computes has waited
seconds to run (docs/known-limits.md). `ClientStalls` measures that from inside the client;
`other_load` loads the cores the way other services on the host would, from a session of
their own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# The client's clock ticks this often; a tick that takes much longer is time it could not run.
TICK_S = 0.01


class ClientStalls:
    """The longest time this process could not run, measured as the longest tick of a
    thread that sleeps `TICK_S` at a time. Use as a context manager around what is timed."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self.longest_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="client-stalls", daemon=True)

    def _tick(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.tick_s):
            now = time.monotonic()
            self.longest_s = max(self.longest_s, now - last - self.tick_s)
            last = now

    def __enter__(self) -> ClientStalls:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def other_load(processes: int) -> Iterator[int]:
    """`processes` (at least one) CPU-bound processes in one session of their own, as
    another service on the host would run them, for the duration; yields the session's id.
    All are killed at the end."""
    spin = "import os\nfor _ in range(%d - 1):\n    if os.fork() == 0: break\nwhile True: pass" % processes
    leader = subprocess.Popen([sys.executable, "-c", spin], start_new_session=True)
    try:
        yield leader.pid
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
