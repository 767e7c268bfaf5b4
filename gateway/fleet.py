"""The fleet's load, for admission across gateways: the streams each Triton server
serves now, for every gateway, read from its metrics port (the gauge `tts` keeps of the
requests it is synthesizing) a few times a second.

A gateway counts its own streams as they open, and the others' from the last reading:
a server's count less this gateway's requests in flight on it then (Backend.serving).
So G gateways admit together what the servers sustain (service.Gateway.stream_refusal),
a reading a little old never counts a gateway's own streams twice, and what it misses
is what the other gateways admitted since, within one interval.
"""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from contract import models as c
from gateway.backends import Backend, Backends

READ_INTERVAL_S = 0.25
READ_TIMEOUT_S = 1.0


def serving(exposition: str) -> int:
    """The `tts` requests a server's metrics say it is synthesizing now (0 where it has no `tts`)."""
    families = text_string_to_metric_families(exposition)
    return int(sum(s.value for f in families if f.name == c.TTS_ACTIVE_METRIC for s in f.samples))


async def read(session: aiohttp.ClientSession, backend: Backend, port: int) -> None:
    """Read what `backend` serves from its metrics on `port`, and note it."""
    url = f"http://{backend.url.rpartition(':')[0]}:{port}/metrics"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=READ_TIMEOUT_S)) as response:
            response.raise_for_status()
            backend.serving(serving(await response.text()))
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
        backend.unread(f"{url}: {str(e) or type(e).__name__}")


async def watch(backends: Backends, port: int, interval_s: float = READ_INTERVAL_S) -> None:
    """For ever: read every server that is up, at once, every `interval_s`."""
    async with aiohttp.ClientSession() as session:
        while True:
            await asyncio.gather(*(read(session, b, port) for b in backends.all if b.up and not b.draining))
            await asyncio.sleep(interval_s)
