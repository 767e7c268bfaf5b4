"""Several gateway processes on one port (`--gateway-workers N`): one Python process's
event loop is the ceiling of a big host, so N workers share the port with SO_REUSEPORT
(the kernel spreads new connections over them), each a whole gateway of its own that
admits through the fleet's count of streams (fleet.py), as separate gateways do.

The parent (`serve_workers`) starts the workers, restarts one that dies, and when
cancelled (SIGTERM, SIGINT) passes SIGTERM on and waits while each drains. A worker
learns its place from WORKER_ENV: its index, every worker's loopback port and the
settings. On its loopback port it answers /metrics and /readyz for itself alone, so that
the shared port's answer can be every worker's: /metrics all of theirs, each sample
labelled with its `worker`; /readyz ready only while every worker is.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass

import aiohttp

from gateway.settings import Settings

log = logging.getLogger("speechstream.gateway")

WORKER_ENV = "SPEECHSTREAM_GATEWAY_WORKER"
# A worker that exits with this code (a wrong voice, a bad address: the configuration)
# would fail again: the parent stops instead of restarting it.
CONFIGURATION_EXIT = 2
RESTART_DELAY_S = 1.0
SIBLING_TIMEOUT_S = 1.0
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Worker:
    """A worker's place among its siblings."""

    index: int
    ports: tuple[int, ...]  # each worker's loopback port, by index

    @property
    def port(self) -> int:
        return self.ports[self.index]

    @property
    def siblings(self) -> dict[int, int]:
        """The other workers' loopback ports, by index."""
        return {i: port for i, port in enumerate(self.ports) if i != self.index}


def worker_environment(worker: Worker, settings: Settings) -> str:
    return json.dumps({"index": worker.index, "ports": worker.ports, "settings": dataclasses.asdict(settings)})


def from_environment(value: str) -> tuple[Worker, Settings]:
    """The worker and its settings, as its parent wrote them; its share of the connections."""
    told = json.loads(value)
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    values = {k: tuple(v) if isinstance(fields[k].default, tuple) else v for k, v in told["settings"].items()}
    settings = Settings(**values)
    workers = settings.gateway_workers
    share = math.ceil(settings.max_connections / workers) if settings.max_connections else 0
    return Worker(told["index"], tuple(told["ports"])), dataclasses.replace(settings, max_connections=share)


async def siblings_say(worker: Worker, path: str) -> dict[int, tuple[int, str] | None]:
    """Each other worker's answer (status, body) to GET `path` on its loopback port; None
    for one that did not answer (starting, restarting, stuck)."""
    async def ask(session: aiohttp.ClientSession, port: int) -> tuple[int, str] | None:
        try:
            async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                return response.status, await response.text()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None

    timeout = aiohttp.ClientTimeout(total=SIBLING_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        answers = await asyncio.gather(*(ask(session, port) for port in worker.siblings.values()))
    return dict(zip(worker.siblings, answers))


async def serve_workers(settings: Settings) -> None:
    """Run `settings.gateway_workers` workers until cancelled, then stop them, each
    draining as a gateway does. Raises SystemExit when a worker's configuration is wrong."""
    ports = tuple(loopback_ports(settings.gateway_workers))
    workers = [start(Worker(i, ports), settings) for i in range(len(ports))]
    log.info("gateway: %d workers on port %d (pids %s)", len(workers), settings.port,
             ", ".join(str(w.pid) for w in workers))
    try:
        while True:
            await asyncio.sleep(RESTART_DELAY_S)
            for i, process in enumerate(workers):
                if (code := process.poll()) is None:
                    continue
                if code == CONFIGURATION_EXIT:
                    raise SystemExit(CONFIGURATION_EXIT)
                log.error("gateway worker %d (pid %d) exited with %d: starting it again", i, process.pid, code)
                workers[i] = start(Worker(i, ports), settings)
    finally:
        await stop(workers)


def start(worker: Worker, settings: Settings) -> subprocess.Popen:
    """A worker: this gateway's module in a new process, in a session of its own (a
    terminal's Ctrl-C reaches the parent only, which passes on one SIGTERM), ending with
    its parent however the parent ends."""
    env = {**os.environ, WORKER_ENV: worker_environment(worker, settings)}
    return subprocess.Popen([sys.executable, "-m", "gateway.server"], env=env, start_new_session=True,
                            preexec_fn=_die_with_parent)


async def stop(workers: list[subprocess.Popen]) -> None:
    for process in workers:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    await asyncio.gather(*(asyncio.to_thread(process.wait) for process in workers))


def loopback_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now, one per worker (all held at once, so distinct)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _die_with_parent() -> None:
    """In the child before it runs: SIGTERM when the parent dies, even by SIGKILL, so
    that no worker outlives it (Linux's prctl)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
