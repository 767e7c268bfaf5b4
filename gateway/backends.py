"""The Triton servers behind a gateway: each `tts` request goes to the one with the least
outstanding work among those up; a health poll marks them down and up again."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import tritonclient.grpc.aio as grpcclient
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE

log = logging.getLogger("speechstream.gateway")

HEALTH_INTERVAL_S = 1.0
# Reconnect within a second of Triton coming back: gRPC's default backoff grows to two
# minutes. (No keepalive pings: Triton's default policy answers them with GOAWAY.)
CHANNEL_ARGS = [
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


@dataclass(eq=False)
class Backend:
    url: str
    client: grpcclient.InferenceServerClient = field(repr=False)
    up: bool = False  # until a health poll says it is ready
    outstanding: int = 0  # tts requests in flight on it now

    def mark(self, up: bool, why: str = "") -> None:
        if up != self.up:
            level = logging.INFO if up else logging.WARNING
            log.log(level, "Triton %s is %s%s", self.url, "up" if up else "down", f": {why}" if why else "")
        self.up = up


def choose(backends: list[Backend]) -> Backend:
    """The backend with the least outstanding work among those up; when none is up, the
    least loaded of all (a stream to a server that is down fails at once, and one that
    just came back is used before the next health poll notices)."""
    candidates = [b for b in backends if b.up] or backends
    return min(candidates, key=lambda b: b.outstanding)


class Backends:
    def __init__(self, urls: tuple[str, ...]) -> None:
        self.all = [Backend(url, grpcclient.InferenceServerClient(url, channel_args=CHANNEL_ARGS)) for url in urls]

    def acquire(self) -> Backend:
        backend = choose(self.all)
        backend.outstanding += 1
        return backend

    @staticmethod
    def release(backend: Backend) -> None:
        backend.outstanding -= 1

    async def poll(self) -> None:
        """Ask every backend whether it is ready, at once; a hung one counts as down."""

        async def ready(backend: Backend) -> None:
            try:
                up = await backend.client.is_server_ready(client_timeout=1)
            except Exception as e:  # unreachable, refusing or hung: down, whatever the cause
                backend.mark(False, str(e).splitlines()[0] if str(e) else type(e).__name__)
                return
            backend.mark(up, "" if up else "not ready")

        await asyncio.gather(*(ready(b) for b in self.all))

    async def watch(self) -> None:
        while True:
            await self.poll()
            await asyncio.sleep(HEALTH_INTERVAL_S)
