"""The fleet's load, for admission across gateways: the streams each Triton server
serves now for the other gateways, read from its metrics port a few times a second.

`tts` keeps two gauges of the requests it is synthesizing: all of them, and each
gateway's apart, by the name the gateway gives itself (`servers.gateway_name`). A
gateway counts its own streams as they open, and the others' from the last reading: the
server's count less its own there as the server counted them (Backend.serving). So G
gateways admit together what the servers sustain (service.Gateway.stream_refusal), a
reading a little old never counts a gateway's own streams twice, and what it misses is
what the other gateways admitted since, within one interval. A request `tts` has
synthesized to its end counts no more, even while its gateway still delivers it to a
slow listener.
"""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from contract import models as c
from gateway.backends.servers import Backend, Backends, gateway_name

READ_INTERVAL_S = 0.25
READ_TIMEOUT_S = 1.0


def serving(exposition: str, gateway: str) -> tuple[int, int]:
    """The `tts` requests a server's metrics say it is synthesizing now: all of them, and
    those of `gateway` (0 and 0 where it has no `tts`)."""
    total = ours = 0.0
    for family in text_string_to_metric_families(exposition):
        if family.name == c.TTS_ACTIVE_METRIC:
            total += sum(s.value for s in family.samples)
        elif family.name == c.TTS_ACTIVE_BY_GATEWAY_METRIC:
            ours += sum(s.value for s in family.samples if s.labels.get(c.GATEWAY_LABEL) == gateway)
    return int(total), int(ours)


async def read(session: aiohttp.ClientSession, backend: Backend, port: int) -> None:
    """Read what `backend` serves from its metrics on `port`, and note it."""
    url = f"http://{backend.url.rpartition(':')[0]}:{port}/metrics"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=READ_TIMEOUT_S)) as response:
            response.raise_for_status()
            backend.serving(*serving(await response.text(), gateway_name()))
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
        backend.unread(f"{url}: {str(e) or type(e).__name__}")


async def watch(backends: Backends, port: int, interval_s: float = READ_INTERVAL_S) -> None:
    """For ever: read every server that is up, at once, every `interval_s`."""
    async with aiohttp.ClientSession() as session:
        while True:
            await asyncio.gather(*(read(session, b, port) for b in backends.all if b.up and not b.draining))
            await asyncio.sleep(interval_s)
