"""Triton servers found in DNS: the gateway's DNS client against a real DNS server on
loopback, its servers following the records (sans I/O), and, over two real Tritons
(127.0.0.1 and 127.0.0.2, as two pods of one headless Service), requests balanced per
stream over a name's addresses, an address added taking requests only once ready, and
one removed draining: no new request, the one in flight ending whole, then forgotten."""

import asyncio
import json
import time
import urllib.request

import pytest

from operations.loopback import free_ports
from operations.supervisor import TritonServer
from perf.tools.workloads import workload
from speechstream import protocol as v1
from tests.dns_server import dns_server
from tests.recorder import Recorder, holding_connection
from tests.servers import Gateway, Gateways, running

NAME = "triton.speech.svc.cluster.local"


async def until(condition, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
def pods(tmp_path_factory):
    """Two tritonservers on the same ports at 127.0.0.1 and 127.0.0.2, as two pods."""
    ports = free_ports(3)
    one, two = (TritonServer(*ports, host=f"127.0.0.{i}") for i in (1, 2))
    with running(one, tmp_path_factory.mktemp("pod1")), running(two, tmp_path_factory.mktemp("pod2")):
        yield one, two


@pytest.fixture
def dns():
    with dns_server() as served:
        yield served


def balancing(gateways: Gateways, pods, dns, *flags: str) -> Gateway:
    """A gateway balancing over NAME's A records (the test sets them; 127.0.0.1 first),
    as DNS says every 0.3 s; no probe: a server is ready once Triton says so over gRPC."""
    records, dns_port = dns
    records.names = {NAME: ["127.0.0.1"]}
    return gateways.start(
        "", "--triton-service", f"{NAME}:{pods[0].grpc_port}", "--dns", f"127.0.0.1:{dns_port}",
        "--resolve-interval", "0.3", "--probe-interval", "0", "--max-streams-per-client", "0", *flags,
    )


@pytest.fixture
def gateway(pods, dns, gateways):
    return balancing(gateways, pods, dns, "--admission-load", "0")


@pytest.fixture
def records(dns):
    """The DNS server's records, which a test sets."""
    return dns[0]


def url(address: str, pods) -> str:
    return f"{address}:{pods[0].grpc_port}"


def readiness(port: int) -> dict[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
        return json.load(r)["backends"]


def per_server(port: int, name: str) -> dict[str, float]:
    """The gateway's gauge `name` for each server it knows, by its URL."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    prefix = name + '{url="'
    return {line[len(prefix):].split('"')[0]: float(line.split()[-1]) for line in lines if line.startswith(prefix)}


def outstanding(port: int) -> dict[str, float]:
    """The gateway's requests in flight on each server it knows."""
    return per_server(port, "speechstream_triton_outstanding")


def wait_for(condition, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


TEXT = " ".join([workload("paragraph")] * 2)  # two requests: the first alone outlasts what buffers hold


async def hold(port: int, contexts: list[str]) -> tuple:
    """A connection that starts two paragraphs in each context, reads until each has audio,
    then reads no more: the gateway stops reading Triton for it, so each context's
    request stays in flight where it went until the caller reads on (`finish`)."""
    ws = await holding_connection(f"ws://127.0.0.1:{port}{v1.PROTOCOL_PATH}")
    client = Recorder(ws)
    await client.until("ready")
    await client.send(type="config", format="pcm_s16le", sample_rate=48000)  # the most bytes: held soonest
    await client.until("ready")
    for context in contexts:
        await client.send(type="speak", context_id=context, text=TEXT)
    async with asyncio.timeout(60):
        while not all(client.audio(context) for context in contexts):
            await client.read()
    return ws, client


async def open_context(client: Recorder, context: str) -> str:
    """'admitted' (its audio_start came; nothing of it is read past that), or the error's code."""
    await client.send(type="speak", context_id=context, text=TEXT)
    async with asyncio.timeout(30):
        while True:
            event = await client.read()
            if event.context_id == context and event.kind in ("audio_start", "error"):
                return "admitted" if event.kind == "audio_start" else event.message["code"]


async def open_until_refused(client: Recorder, prefix: str, at_most: int = 12) -> list[str]:
    """open_context's outcomes, context after context, until one is refused (or `at_most`):
    what a fraction of the capacity admits grows with the host's speed."""
    outcomes: list[str] = []
    while v1.SERVER_BUSY not in outcomes and len(outcomes) < at_most:
        outcomes.append(await open_context(client, f"{prefix}{len(outcomes)}"))
    return outcomes


async def finish(ws, client: Recorder, contexts: list[str]) -> dict[str, dict]:
    """Read on until every context ended; its last message each."""
    ends = {}
    try:
        async with asyncio.timeout(240):
            while len(ends) < len(contexts):
                event = await client.read()
                if event.kind in ("done", "error"):
                    ends[event.context_id] = event.message
    finally:
        await ws.close()
    return ends


def whole(client: Recorder, context: str) -> bool:
    frames = client.audio(context)
    return bool(frames) and frames[-1].last and [f.seq for f in frames] == list(range(len(frames)))


def test_requests_are_spread_over_the_addresses_of_one_name(pods, gateway, records):
    records.names = {NAME: ["127.0.0.1", "127.0.0.2"]}
    both = {url("127.0.0.1", pods), url("127.0.0.2", pods)}
    wait_for(lambda: readiness(gateway.port) == dict.fromkeys(both, "ready"), "both pods ready")

    async def run():
        ws, client = await hold(gateway.port, ["c0", "c1", "c2", "c3"])
        spread = await asyncio.to_thread(outstanding, gateway.port)
        await ws.close()  # cancels them
        return spread

    assert asyncio.run(run()) == dict.fromkeys(both, 2)


def test_an_address_added_to_dns_takes_requests_only_once_ready(pods, gateway, records):
    first, dead, second = url("127.0.0.1", pods), url("127.0.0.3", pods), url("127.0.0.2", pods)
    records.names = {NAME: ["127.0.0.1", "127.0.0.3"]}  # nothing listens at .3
    wait_for(lambda: readiness(gateway.port).get(dead, "").startswith("down: "), "127.0.0.3 found and down")

    async def spread(contexts):
        ws, client = await hold(gateway.port, contexts)
        try:
            return await asyncio.to_thread(outstanding, gateway.port)
        finally:
            await ws.close()

    assert asyncio.run(spread(["a0", "a1"])) == {first: 2, dead: 0}  # the idle server is not ready: passed over
    wait_for(lambda: outstanding(gateway.port) == {first: 0, dead: 0}, "the held requests cancelled")
    records.names = {NAME: ["127.0.0.1", "127.0.0.2"]}
    wait_for(lambda: readiness(gateway.port) == {first: "ready", second: "ready"}, ".2 ready, .3 forgotten")
    assert asyncio.run(spread(["b0", "b1"])) == {first: 1, second: 1}


def test_an_address_removed_from_dns_takes_no_new_request_and_ends_the_one_in_flight(pods, gateway, records):
    first, second = url("127.0.0.1", pods), url("127.0.0.2", pods)
    records.names = {NAME: ["127.0.0.1", "127.0.0.2"]}
    wait_for(lambda: readiness(gateway.port) == {first: "ready", second: "ready"}, "both pods ready")

    async def run():
        held = await hold(gateway.port, ["c0", "c1"])  # one request on each pod, held
        assert await asyncio.to_thread(outstanding, gateway.port) == {first: 1, second: 1}
        records.names = {NAME: ["127.0.0.1"]}
        await asyncio.to_thread(wait_for, lambda: readiness(gateway.port)[second].startswith("draining: "), "draining")
        later = await hold(gateway.port, ["n0", "n1"])
        during = await asyncio.to_thread(outstanding, gateway.port)
        return during, await finish(*later, ["n0", "n1"]), await finish(*held, ["c0", "c1"]), held[1]

    during, later_ends, held_ends, held = asyncio.run(run())
    assert during == {first: 3, second: 1}  # the new requests all went to the pod still in DNS
    assert [m["type"] for m in [*later_ends.values(), *held_ends.values()]] == ["done"] * 4
    assert whole(held, "c1")  # the context whose request was on the pod that left: every frame
    wait_for(lambda: set(readiness(gateway.port)) == {first}, "the drained pod forgotten")
    assert set(outstanding(gateway.port)) == {first}  # and its metrics gone with it


def test_a_pod_that_has_not_measured_is_left_out_of_the_capacity_admitted(pods, dns, records, gateways):
    """A pod not measured yet once switched admission off on every gateway until it had."""
    first, second = url("127.0.0.1", pods), url("127.0.0.2", pods)
    flags = "--admission-load", "0.1", "--admission-slack", "0", "--fleet-metrics-port", str(pods[0].metrics_port)
    gateway = balancing(gateways, pods, dns, *flags)
    records.names = {NAME: ["127.0.0.1", "127.0.0.2"]}
    wait_for(lambda: readiness(gateway.port) == {first: "ready", second: "ready"}, "both pods ready")

    async def run():
        ws = await holding_connection(gateway.url)
        client = Recorder(ws)
        try:
            await client.until("ready")
            await client.send(type="speak", context_id="warm", text="Warm up.")  # to the first pod, which measures
            await client.until("done", "warm")
            capacity = await asyncio.to_thread(per_server, gateway.port, "speechstream_triton_capacity_streams")
            return capacity, await open_until_refused(client, "c")
        finally:
            await ws.close()

    capacity, outcomes = asyncio.run(run())
    assert capacity[first] > 0 and capacity[second] == 0  # as far as this gateway has heard
    assert outcomes[0] == "admitted" and v1.SERVER_BUSY in outcomes  # admission on, by the first pod's capacity

