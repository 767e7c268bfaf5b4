"""Triton servers found in DNS: the A records of one name (a Kubernetes headless
Service's), resolved again every few seconds, each address a backend on the Service's
port. A new address takes requests once it is up and has passed its probe; one gone
from the records drains (servers.Backends.update). Balancing per request over the pods
is the point: kube-proxy would pin the gateway's one HTTP/2 connection to one pod.

The name is resolved by the system's resolver, or by asking one DNS server directly
over UDP (`--dns`): the query and the reading of its answer are sans I/O, here.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
from dataclasses import dataclass

from gateway.backends.servers import Backends

log = logging.getLogger("speechstream.gateway")

DNS_TIMEOUT_S = 2.0  # a server that has not answered by then is asked again at the next round
DNS_PORT = 53
TYPE_A, CLASS_IN = 1, 1
RCODE_NXDOMAIN = 3


class DnsError(Exception):
    """The name could not be resolved now (the servers known are kept)."""


class BadAddress(ValueError):
    """A setting that is not HOST:PORT, said at start-up."""


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str, default_port: int | None = None) -> Address:
        """HOST:PORT, or HOST alone where there is a default port; HOST a name DNS can ask for."""
        host, colon, port = text.rpartition(":")
        if not colon:
            host, port = text, ""
        if not host or not (port.isdigit() or (not port and default_port)):
            raise BadAddress(f"{text!r} is not HOST:PORT")
        try:
            query(host, 0)
        except UnicodeError:  # an empty or overlong label
            raise BadAddress(f"{host!r} is not a DNS name") from None
        return cls(host, int(port) if port else default_port)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def query(name: str, ident: int) -> bytes:
    """A DNS query for `name`'s A records, recursion desired."""
    header = struct.pack("!6H", ident, 0x0100, 1, 0, 0, 0)
    labels = b"".join(bytes([len(label)]) + label for label in name.rstrip(".").encode("idna").split(b"."))
    return header + labels + b"\0" + struct.pack("!2H", TYPE_A, CLASS_IN)


def a_records(reply: bytes, ident: int) -> list[str]:
    """The IPv4 addresses answering query `ident`; none for a name that does not exist
    (a headless Service with no pod ready)."""
    try:
        answered, flags, questions, answers = struct.unpack_from("!4H", reply)
        if answered != ident or not flags & 0x8000:
            raise DnsError("a reply to another query")
        if flags & 0x0200:
            raise DnsError("the answer was truncated (more addresses than UDP carries)")
        if (rcode := flags & 0xF) == RCODE_NXDOMAIN:
            return []
        if rcode:
            raise DnsError(f"the server answered with error code {rcode}")
        offset = 12
        for _ in range(questions):
            offset = _past_name(reply, offset) + 4
        found = []
        for _ in range(answers):  # A records, after any CNAME the server followed
            offset = _past_name(reply, offset)
            rtype, rclass, _ttl, length = struct.unpack_from("!2HIH", reply, offset)
            data, offset = reply[offset + 10:offset + 10 + length], offset + 10 + length
            if len(data) < length:
                raise IndexError
            if rtype == TYPE_A and rclass == CLASS_IN and length == 4:
                found.append(socket.inet_ntoa(data))
        return found
    except (struct.error, IndexError):
        raise DnsError("a malformed reply") from None


def _past_name(message: bytes, offset: int) -> int:
    """Where the name at `offset` ends: after its zero label, or its compression pointer."""
    while (length := message[offset]) and length < 0xC0:
        offset += 1 + length
    return offset + (2 if length else 1)


async def ask(server: Address, name: str, timeout_s: float = DNS_TIMEOUT_S) -> list[str]:
    """`name`'s A records, asked of `server` over UDP."""
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[bytes] = loop.create_future()

    class Reader(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr) -> None:
            if not reply.done():
                reply.set_result(data)

        def error_received(self, exc: Exception) -> None:  # e.g. ICMP port unreachable
            if not reply.done():
                reply.set_exception(exc)

    transport, _ = await loop.create_datagram_endpoint(Reader, remote_addr=(server.host, server.port))
    try:
        ident = random.randrange(1 << 16)
        transport.sendto(query(name, ident))
        try:
            return a_records(await asyncio.wait_for(reply, timeout_s), ident)
        except asyncio.TimeoutError:  # not the builtin on Python 3.10
            raise DnsError(f"no answer within {timeout_s:g} s") from None
    finally:
        transport.close()


async def system_resolve(name: str) -> list[str]:
    """`name`'s IPv4 addresses, by the system's resolver (/etc/hosts, resolv.conf)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(name, None, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        if e.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            return []
        raise DnsError(e.strerror) from None
    return list(dict.fromkeys(info[4][0] for info in infos))


async def resolve(name: str, dns: Address | None) -> list[str]:
    """`name`'s IPv4 addresses, by `dns`, or by the system's resolver."""
    try:
        return await (ask(dns, name) if dns else system_resolve(name))
    except OSError as e:
        raise DnsError(str(e) or type(e).__name__) from None


async def watch(backends: Backends, service: Address, dns: Address | None, interval_s: float) -> None:
    """For ever: the backends are the A records of `service`'s name, on its port, resolved
    every `interval_s`. A failed resolution keeps the servers known (said once, until it
    succeeds again)."""
    via = f"the DNS server {dns}" if dns else "the system's resolver"
    failing, last = False, None  # what it last resolved to; None: nothing yet
    while True:
        try:
            found = await resolve(service.host, dns)
        except DnsError as e:
            if not failing:
                log.warning("cannot resolve %s through %s: %s; keeping the %d Triton servers known", service.host, via, e,
                            len(backends.all))
            failing = True
        else:
            if failing:
                log.info("%s resolves again", service.host)
            if not found and found != last:
                log.warning("%s has no A records (through %s): no Triton server takes new requests", service.host, via)
            failing, last = False, found
            backends.update(f"{address}:{service.port}" for address in found)
        await asyncio.sleep(interval_s)
