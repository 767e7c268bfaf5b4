"""One gateway, two real Triton servers on loopback: contexts are spread across both, and
when one is killed mid-run the other carries on: the killed server's streams resume on
it, and it takes every new context."""

import asyncio
import time

import pytest

from contract import models as c
from operations.loopback import free_ports, gateway_metric, triton_metrics
from operations.supervisor import TritonServer
from perf.tools.workloads import workload
from speechstream import protocol as v1
from speechstream.client import connection
from tests.integration.test_triton_faults import kill_tree, readiness
from tests.recorder import Recorder


@pytest.fixture
def two_tritons(tmp_path):
    servers = [TritonServer(*free_ports(3)) for _ in range(2)]
    logs = [(tmp_path / f"triton{i}.log").open("w") for i in range(2)]
    for server, log in zip(servers, logs):
        server.start(stdout=log)
    try:
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server, log in zip(servers, logs):
            server.stop()
            log.close()


def test_contexts_spread_across_two_tritons_and_survive_losing_one(two_tritons, gateways):
    a, b = two_tritons
    urls = [f"127.0.0.1:{s.grpc_port}" for s in two_tritons]
    port = gateways.start(",".join(urls)).port
    deadline = time.monotonic() + 10  # /readyz answers once one server passed its probe: wait for both
    while set(readiness(port)[1]["backends"].values()) != {"ready"}:
        assert time.monotonic() < deadline, readiness(port)
        time.sleep(0.1)
    run(a, b, urls, port)


def run(a: TritonServer, b: TritonServer, urls: list[str], port: int) -> None:
    url = f"ws://127.0.0.1:{port}{v1.PROTOCOL_PATH}"

    async def first_wave():
        async with connection(url) as ws:
            client = Recorder(ws)
            await client.until("ready")
            for i in range(4):
                await client.send(type="speak", context_id=f"c{i}", text=workload("paragraph"))
            while not all(client.audio(f"c{i}") for i in range(4)):
                await client.read()
            spread = [triton_metrics(s.metrics_port)[c.TTS_ACTIVE_METRIC] for s in (a, b)]
            outstanding = [gateway_metric(port, "speechstream_triton_outstanding", u) for u in urls]
            kill_tree(b)
            ends = {}
            async with asyncio.timeout(120):
                while len(ends) < 4:
                    event = await client.read()
                    if event.kind in ("done", "error"):
                        ends[event.context_id] = event.message
            return spread, outstanding, ends, client

    spread, outstanding, ends, client = asyncio.run(first_wave())
    assert spread == [2, 2] and outstanding == [2, 2]  # two contexts on each server
    assert [m["type"] for m in ends.values()] == ["done"] * 4
    # The killed server's two streams were told, then went on on the survivor, at once.
    resuming = client.messages("resuming")
    assert len({m["context_id"] for m in resuming}) == 2 == len(resuming)
    assert all(m["code"] == v1.BACKEND_UNAVAILABLE for m in resuming)
    for context_id in ends:
        frames = client.audio(context_id)
        assert frames[-1].last and [f.seq for f in frames] == list(range(len(frames)))
        assert [f.sample_offset for f in frames] == [i * 960 for i in range(len(frames))]
    for m in resuming:
        (told,) = [e.at for e in client.events if e.message is m]
        after = [e.at for e in client.frames(m["context_id"]) if e.at > told]
        print(f"{m['context_id']}: audio again {after[0] - told:.2f} s after `resuming`")
        assert after[0] - told < 5

    assert triton_metrics(port)["speechstream_stream_resumptions_total"] == 2  # once per outage per stream
    status, body = readiness(port)
    assert status == 200 and body["backends"][urls[0]] == "ready" and body["backends"][urls[1]].startswith("down: ")
    assert gateway_metric(port, "speechstream_triton_up", urls[1]) == 0

    async def second_wave():
        async with connection(url) as ws:
            client = Recorder(ws)
            await client.until("ready")
            for i in range(3):
                await client.send(type="speak", context_id=f"n{i}", text="Still speaking, on one server.")
            async with asyncio.timeout(60):
                while len(client.messages("done")) < 3:
                    await client.read()
            return [m for m in client.messages() if m["type"] in ("done", "error")]

    ends = asyncio.run(second_wave())
    assert [m["type"] for m in ends] == ["done"] * 3 and all(m["audio_ms"] > 1000 for m in ends)
