"""Triton servers found in DNS: the gateway's DNS client against a real DNS server on
loopback (in this process), and its servers following the records (sans I/O). Over real
Tritons: tests/integration/test_discovery.py."""

import asyncio

import pytest
from dnslib import CNAME, QTYPE, RCODE, RR, A, DNSHeader, DNSQuestion, DNSRecord

from gateway.backends import discovery
from gateway.backends.servers import Backends, NoBackend, choose
from gateway.edge.metrics import Metrics
from tests.dns_server import dns_server

NAME = "triton.speech.svc.cluster.local"


def test_a_query_is_one_a_question_with_recursion_desired():
    parsed = DNSRecord.parse(discovery.query(NAME, 0x1234))
    assert parsed.header.id == 0x1234 and parsed.header.rd and not parsed.header.qr
    assert [(str(q.qname), q.qtype) for q in parsed.questions] == [(NAME + ".", QTYPE.A)]


def reply(ident: int, *records: RR, rcode: int = RCODE.NOERROR, truncated: bool = False) -> bytes:
    header = DNSHeader(id=ident, qr=1, ra=1, rcode=rcode, tc=int(truncated))
    return DNSRecord(header, q=DNSQuestion(NAME), rr=list(records)).pack()


def test_an_answer_gives_its_a_records_past_a_cname_and_compressed_names():
    answer = reply(7, RR("triton", QTYPE.CNAME, rdata=CNAME(NAME)), RR(NAME, QTYPE.A, rdata=A("10.1.0.5")),
                   RR(NAME, QTYPE.A, rdata=A("10.1.0.9")))
    assert discovery.a_records(answer, 7) == ["10.1.0.5", "10.1.0.9"]
    assert discovery.a_records(reply(7, rcode=RCODE.NXDOMAIN), 7) == []  # no pod ready: no server


@pytest.mark.parametrize("answer,why", [
    (reply(8), "another query"),
    (reply(7, rcode=RCODE.SERVFAIL), "error code 2"),
    (reply(7, truncated=True), "truncated"),
    (reply(7, RR(NAME, QTYPE.A, rdata=A("10.1.0.5")))[:-3], "malformed"),
])
def test_an_answer_that_cannot_be_read_is_an_error_not_an_empty_list(answer, why):
    with pytest.raises(discovery.DnsError, match=why):
        discovery.a_records(answer, 7)


def test_addresses_are_host_and_port():
    assert discovery.Address.parse("triton.ns.svc:8001") == discovery.Address("triton.ns.svc", 8001)
    assert discovery.Address.parse("10.0.0.10", discovery.DNS_PORT) == discovery.Address("10.0.0.10", 53)
    for bad in ("triton.ns.svc", "triton:grpc", ":8001", "a..b:8001"):
        with pytest.raises(discovery.BadAddress):
            discovery.Address.parse(bad)


def test_the_client_asks_a_real_dns_server_and_sees_its_records_change():
    async def ask(port):
        return await discovery.resolve(NAME, discovery.Address("127.0.0.1", port))

    with dns_server() as (records, port):
        records.names = {NAME: ["127.0.0.1", "127.0.0.2"]}
        assert asyncio.run(ask(port)) == ["127.0.0.1", "127.0.0.2"]
        records.names = {NAME: ["127.0.0.2"]}
        assert asyncio.run(ask(port)) == ["127.0.0.2"]
        records.names = {}
        assert asyncio.run(ask(port)) == []
    with pytest.raises(discovery.DnsError):  # nobody answers: an error, and the servers known are kept
        asyncio.run(ask(port))


def test_a_server_gone_from_dns_drains_and_is_forgotten_once_its_requests_end():
    async def run():
        backends = Backends(())
        backends.update(["10.0.0.1:8001", "10.0.0.2:8001"])
        first, second = backends.all
        for b in backends.all:
            b.mark(True)
            b.probed(None)
        held = backends.acquire()
        assert held is first
        backends.update(["10.0.0.2:8001"])
        assert first.draining and first.state == "draining: gone from DNS, 1 in flight"
        assert [backends.acquire() for _ in range(2)] == [second, second]  # no new request to it
        await backends.close_drained()
        assert backends.all == [first, second]  # its request in flight keeps its channel
        backends.release(held)
        await backends.close_drained()
        assert backends.all == [second]
        backends.update([])
        with pytest.raises(NoBackend):
            choose(backends.all)
        backends.update(["10.0.0.2:8001"])  # back before it drained: used again
        assert choose(backends.all) is second
        await backends.close()

    asyncio.run(run())


def test_a_server_found_in_dns_takes_requests_only_once_ready():
    async def run():
        backends = Backends(())
        backends.update(["10.0.0.1:8001"])
        old = backends.all[0]
        old.mark(True)
        old.probed(None)
        old.outstanding = 10
        backends.update(["10.0.0.1:8001", "10.0.0.3:8001"])
        new = backends.all[1]
        assert choose(backends.all) is old  # idle, but not polled yet
        new.mark(True)
        assert choose(backends.all) is old  # up, but not probed yet
        new.probed(None)
        assert choose(backends.all) is new
        await backends.close()

    asyncio.run(run())


def test_each_servers_metrics_come_and_go_with_it():
    def labelled(metrics):
        return {line.split('"')[1] for line in metrics.exposition()[0].decode().splitlines()
                if line.startswith("speechstream_triton_up{")}

    async def run():
        backends = Backends(())
        metrics = Metrics(lambda: 0, lambda: 0, lambda: 0, backends)
        backends.update(["10.0.0.1:8001", "10.0.0.2:8001"])
        assert labelled(metrics) == {"10.0.0.1:8001", "10.0.0.2:8001"}
        backends.update(["10.0.0.2:8001"])
        await backends.close_drained()
        assert labelled(metrics) == {"10.0.0.2:8001"}
        await backends.close()

    asyncio.run(run())


def test_the_watch_follows_the_records_of_a_real_dns_server():
    async def run(records, port):
        backends = Backends(())
        watch = asyncio.create_task(discovery.watch(
            backends, discovery.Address(NAME, 8001), discovery.Address("127.0.0.1", port), interval_s=0.05))
        try:
            records.names = {NAME: ["10.0.0.1", "10.0.0.2"]}
            await until(lambda: [b.url for b in backends.all] == ["10.0.0.1:8001", "10.0.0.2:8001"])
            records.names = {NAME: ["10.0.0.2"]}
            await until(lambda: backends.all[0].draining)
        finally:
            watch.cancel()
            await backends.close()

    with dns_server() as (records, port):
        asyncio.run(run(records, port))


async def until(condition, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.02)
