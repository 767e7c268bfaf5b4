"""Faults beside the load (--chaos): perf.soak.chaos strikes the supervised Triton while the
listeners run, and Triton is to serve again after the last."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from operations.loopback import Servers
from perf.soak.chaos import Fault, inject

READY_S = 120.0  # after a chaos run, Triton must be ready again within this


@contextlib.asynccontextmanager
async def beside_the_load(servers: Servers, which: str, every_s: float, load_s: float,
                          start: float) -> AsyncIterator[list[Fault]]:
    """The faults struck so far, one of FAULT_SETS[which] every `every_s` until the load's
    `load_s` are over (none while the last utterances drain); on leaving, the last fault's
    recovery measured to its end and Triton serving again. Nothing of that if the load
    failed."""
    servers.supervise()
    faults: list[Fault] = []
    load_over = asyncio.Event()
    chaos = asyncio.create_task(inject(servers.triton, servers.url, every_s, faults, load_over, which, start))
    asyncio.get_running_loop().call_later(load_s, load_over.set)
    yield faults
    load_over.set()
    await chaos
    await ready_again(servers)


async def ready_again(servers: Servers) -> None:
    """Wait until the supervisor has Triton serving again after the last fault."""
    deadline = time.monotonic() + READY_S
    while not (servers.triton.fault() is None and servers.triton.is_ready()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Triton not ready {READY_S:.0f} s after the chaos")
        await asyncio.sleep(1)
