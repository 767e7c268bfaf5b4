"""`--gateway-workers 2` over the session's real Triton (gateway/edge/workers.py): two gateway
processes on one port, connections spread over them by the kernel, admission held
across them as across gateways, /metrics and /readyz answering for both, a worker killed
by pid started again, and SIGTERM draining both with nothing left running."""

import asyncio
import contextlib
import json
import signal
import time
import urllib.error
import urllib.request

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from perf.tools.workloads import workload
from speechstream import protocol as v1
from speechstream.client import SpeechClient, SpeechError
from tests.integration.test_admission import warmed
from tests.integration.test_discovery import open_context, wait_for
from tests.recorder import Recorder

WORKERS = 2
CONNECTIONS = 12  # all on one worker of two: a chance of 1 in 2,048
ELSEWHERE = "speechstream_triton_streams_elsewhere"


@pytest.fixture
def workers(triton, gateways):
    """Two workers admitting one stream: under one of the capacity measured here (10 to 25
    real-time streams), so that a stream in flight anywhere fills it."""
    return gateways.start(triton.grpc_url, "--gateway-workers", str(WORKERS), "--admission-load", "0.02",
                          "--admission-slack", "0", "--probe-interval", "0",
                          "--fleet-metrics-port", str(triton.metrics_port))


def samples(port: int, name: str) -> dict[str, float]:
    """The shared port's samples of `name`, by worker."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        families = text_string_to_metric_families(r.read().decode())
        return {s.labels["worker"]: s.value for f in families for s in f.samples if s.name == name}


def readyz(port: int) -> tuple[int, dict]:
    """The status and body; (0, {}) for a connection reset (one the kernel had queued for a
    worker that was killed)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except (urllib.error.URLError, ConnectionError):
        return 0, {}


def worker_pids(gateway) -> list[int]:
    """The parent's live workers (not one killed and not yet reaped)."""
    pids = []
    for child in psutil.Process(gateway.process.pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.status() != psutil.STATUS_ZOMBIE:
                pids.append(child.pid)
    return pids


def test_connections_spread_over_the_workers_and_metrics_and_readiness_answer_for_all(workers):
    status, body = readyz(workers.port)
    assert status == 200 and body["workers"] == {"0": True, "1": True}

    async def run():
        clients = [await SpeechClient.connect(workers.url) for _ in range(CONNECTIONS)]
        try:
            return await asyncio.to_thread(samples, workers.port, "speechstream_connections")
        finally:
            await asyncio.gather(*(c.close() for c in clients))

    connections = asyncio.run(run())
    assert set(connections) == {"0", "1"}  # one exposition, both workers' samples
    assert sum(connections.values()) == CONNECTIONS and min(connections.values()) > 0


async def by_worker(port: int, each: int) -> dict[str, list[Recorder]]:
    """Warmed connections (test_admission's) until each worker holds `each`, sorted by
    the worker they landed on, as its connections gauge says; the extra ones closed. Each
    warm-up waits until no worker counts the last one in flight (it would be refused), and
    so does the return."""
    held: dict[str, list[Recorder]] = {"0": [], "1": []}
    for _ in range(8 * each):
        await asyncio.to_thread(wait_for, lambda: not any(samples(port, ELSEWHERE).values()), "no stream elsewhere")
        before = await asyncio.to_thread(samples, port, "speechstream_connections")
        client = await warmed(port)
        after = await asyncio.to_thread(samples, port, "speechstream_connections")
        (worker,) = [w for w in after if after[w] > before.get(w, 0)]
        if len(held[worker]) < each:
            held[worker].append(client)
        else:
            await client.ws.close()
        if min(map(len, held.values())) == each:
            await asyncio.to_thread(wait_for, lambda: not any(samples(port, ELSEWHERE).values()),
                                    "the last warm-up no longer counted")
            return held
    raise AssertionError(f"the kernel put nearly every connection on one worker: {held}")


def test_workers_admit_together_what_one_gateway_would(triton, workers):
    """Each worker counts the other's streams from Triton's metrics (fleet.py), as two
    gateways do (test_admission): once one worker has filled what may be admitted, the
    other, with no stream of its own, refuses too (alone, it would admit one); once that
    stream ends it admits again."""
    async def run():
        held = await by_worker(workers.port, 2)
        try:
            outcomes = [await open_context(client, f"a{i}") for i, client in enumerate(held["0"])]
            admitted = outcomes.count("admitted")
            await asyncio.to_thread(wait_for, lambda: samples(workers.port, ELSEWHERE)["1"] >= admitted,
                                    "worker 1 sees worker 0's streams")
            while_full = await open_context(held["1"][0], "b0")
            await asyncio.gather(*(c.ws.close() for c in held["0"]))  # their streams end: room again
            await asyncio.to_thread(wait_for, lambda: samples(workers.port, ELSEWHERE)["1"] == 0,
                                    "worker 0's streams gone")
            once_free = await open_context(held["1"][1], "b1")
            return outcomes, while_full, once_free
        finally:
            await asyncio.gather(*(c.ws.close() for clients in held.values() for c in clients))

    outcomes, while_full, once_free = asyncio.run(run())
    assert outcomes == ["admitted", v1.SERVER_BUSY]  # worker 0 filled it
    assert while_full == v1.SERVER_BUSY  # worker 1 admits nothing more while those run
    assert once_free == "admitted"


def test_a_worker_killed_by_pid_is_started_again_and_the_port_serves_on(workers):
    killed = worker_pids(workers)[0]
    psutil.Process(killed).kill()
    wait_for(lambda: len(worker_pids(workers)) == WORKERS and killed not in worker_pids(workers)
             and readyz(workers.port)[0] == 200, "the worker started again", timeout_s=30)

    async def speak():
        async with await SpeechClient.connect(workers.url) as client:
            return [f async for f in client.speak("Still serving.")]

    assert asyncio.run(speak())
    assert "exited with -9: starting it again" in workers.log_path.read_text()


def test_sigterm_drains_every_worker_and_leaves_nothing_running(triton, gateways):
    """Streams on both workers, each with its first audio out, when the parent is told to
    stop: every one ends `done` (drained, not closed with 1001), a stream asked for
    meanwhile is refused, and no worker outlives the parent."""
    gateway = gateways.start(triton.grpc_url, "--gateway-workers", str(WORKERS), "--drain", "30",
                             "--probe-interval", "0", "--admission-load", "0")
    pids = worker_pids(gateway)

    async def run():
        clients = [await SpeechClient.connect(gateway.url) for _ in range(CONNECTIONS)]
        contexts = [c.context() for c in clients]
        streams = [context.events() for context in contexts]
        for context in contexts:
            await context.speak(workload("paragraph"))
        firsts = [await anext(stream) for stream in streams]  # each has begun
        gateway.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        async with await SpeechClient.connect(gateway.url) as late_client:
            try:
                await rest(late_client.speak("Am I too late?"))
                late = "spoken"
            except SpeechError as e:  # whichever worker it reached
                late = e.code
        rests = await asyncio.gather(*(rest(stream) for stream in streams))
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        return firsts, rests, late

    firsts, rests, late = asyncio.run(run())
    assert all(first.frame is not None for first in firsts)
    assert all(events[-1].kind == "done" for events in rests)  # every stream on both workers ended whole
    assert late == v1.SERVER_DRAINING
    assert gateway.process.wait(30) == 0
    time.sleep(0.5)
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


async def rest(stream) -> list:
    return [e async for e in stream]
