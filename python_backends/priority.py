"""Stage calls at two priorities: urgent calls at the process's own, the others on
threads BACKGROUND_NICE below it. The Thinker on llama.cpp writes at the lower one too:
a draft while the user speaks must not hold back the recognizer's final pass.

Calls are not preempted: a call far ahead of its listener's need can hold a core while
a new stream's first packet waits for it. The scheduler in `tts` lets an urgent call run
beside the calls that hold the slots (DeadlineScheduler's `urgent_slots`), and the
kernel then gives that call the core the others were using: on Linux a thread's nice
value is its own, and a thread at nice 10 gets about a tenth of a core that a thread at
nice 0 also wants. With no urgent call running, the other calls have the cores to
themselves, whatever their nice value. Raising a thread's nice value needs no
privilege; lowering it again would, so the two priorities are two sets of threads.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

BACKGROUND_NICE = 10
_LOWEST = 19  # the least priority a nice value gives


def lower_priority() -> None:
    """Run the calling thread BACKGROUND_NICE below the priority it has."""
    thread = threading.get_native_id()
    nice = os.getpriority(os.PRIO_PROCESS, thread)
    os.setpriority(os.PRIO_PROCESS, thread, min(nice + BACKGROUND_NICE, _LOWEST))


def background_pool(threads: int, name: str) -> ThreadPoolExecutor:
    """A pool whose threads compute calls that are not urgent."""
    return ThreadPoolExecutor(threads, thread_name_prefix=f"{name}-background", initializer=lower_priority)


def pools(threads: int, name: str) -> dict[bool, ThreadPoolExecutor]:
    """A stage's workers by urgency: `threads` at the process's priority for urgent
    calls, as many below it for the others."""
    return {True: ThreadPoolExecutor(threads, thread_name_prefix=name), False: background_pool(threads, name)}
