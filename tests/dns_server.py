"""A real DNS server on loopback (dnslib's), answering A queries from records a test
changes as it runs: a headless Service's name, whose pods come and go."""

import contextlib
from collections.abc import Iterator

from dnslib import QTYPE, RCODE, RR, A
from dnslib.server import BaseResolver, DNSLogger, DNSServer

from operations.loopback import free_ports


class Records(BaseResolver):
    """Each name's IPv4 addresses; a name not set does not exist (NXDOMAIN)."""

    def __init__(self) -> None:
        self.names: dict[str, list[str]] = {}  # replaced whole by the test: a reader sees one or the other

    def resolve(self, request, handler):
        reply = request.reply()
        name = str(request.q.qname).rstrip(".")
        if name not in self.names:
            reply.header.rcode = RCODE.NXDOMAIN
        elif request.q.qtype == QTYPE.A:
            for address in self.names[name]:
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=1))
        return reply


@contextlib.contextmanager
def dns_server() -> Iterator[tuple[Records, int]]:
    """The records and the UDP port of a DNS server on 127.0.0.1, answering until the end."""
    records, port = Records(), free_ports(1)[0]
    server = DNSServer(records, address="127.0.0.1", port=port, logger=DNSLogger("-request,-reply,-truncated"))
    server.start_thread()
    try:
        yield records, port
    finally:
        server.stop()
