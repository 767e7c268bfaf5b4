"""The Triton servers behind a gateway: each `tts` request goes to the one with the least
outstanding work among those up; a health poll marks them down and up again, and a
readiness probe (synthesis.Synthesizer.watch) says whether each can synthesize. The
servers are a fixed list, or what DNS says now (discovery.py): one that leaves it
drains, taking no new request, and its channel is closed once its last one ends."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

import tritonclient.grpc.aio as grpcclient
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE

log = logging.getLogger("speechstream.gateway")

HEALTH_INTERVAL_S = 1.0
NOT_PROBED = "not probed yet"
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
    triton: grpcclient.InferenceServerClient = field(repr=False)  # its gRPC client
    up: bool = False  # until a health poll says it is ready
    outstanding: int = 0  # tts requests in flight on it now
    probe_error: str | None = NOT_PROBED  # why it cannot synthesize; None: the last probe passed
    why_down: str = "not polled yet"
    # Real-time streams it sustains, as each BLS model last said (0: not measured yet).
    capacity_by_model: dict[str, float] = field(default_factory=dict)
    draining: bool = False  # gone from DNS: no new request; closed once `outstanding` is 0
    elsewhere: int = 0  # streams it serves for other gateways, as its metrics said last (fleet.py)
    uncounted: str | None = None  # why its metrics could not be read last; None: they were

    @property
    def capacity(self) -> float:
        """Real-time streams it sustains: the least that its models have measured (the
        families share its cores), 0 while none has."""
        return min((x for x in self.capacity_by_model.values() if x > 0), default=0.0)

    @property
    def ready(self) -> bool:
        """Whether it can synthesize now: up, and its last probe passed."""
        return self.up and self.probe_error is None

    @property
    def state(self) -> str:
        """`ready`, or why not."""
        if self.draining:
            return f"draining: gone from DNS, {self.outstanding} in flight"
        if not self.up:
            return f"down: {self.why_down}"
        return "ready" if self.probe_error is None else f"cannot synthesize: {self.probe_error}"

    def mark(self, up: bool, why: str = "") -> None:
        if up != self.up:
            level = logging.INFO if up else logging.WARNING
            log.log(level, "Triton %s is %s%s", self.url, "up" if up else "down", f": {why}" if why else "")
            if up:
                self.probe_error = NOT_PROBED  # back: probed again before it counts as ready
        self.up = up
        self.why_down = "" if up else why or "not ready"

    def drain(self, draining: bool) -> None:
        """Whether it has left DNS (and takes no new request), or is back in it."""
        if draining != self.draining:
            if draining:
                log.info("Triton %s left DNS: draining, no new requests (%d in flight)", self.url, self.outstanding)
            else:
                log.info("Triton %s is back in DNS: it takes requests again", self.url)
        self.draining = draining

    def serving(self, streams: int, ours: int) -> None:
        """It says it serves `streams` now, for every gateway, `ours` of them for this one:
        the rest are elsewhere (ours are counted as they open)."""
        if self.uncounted:
            log.info("Triton %s: its streams are read again", self.url)
        self.uncounted = None
        self.elsewhere = max(0, streams - ours)

    def unread(self, why: str) -> None:
        """Its metrics could not be read: only this gateway's streams on it are counted."""
        if not self.uncounted:
            log.warning("Triton %s: cannot read the streams it serves (%s); admission counts only this gateway's "
                        "there (is --fleet-metrics-port its metrics port?)", self.url, why)
        self.uncounted, self.elsewhere = why, 0

    def probed(self, error: str | None) -> None:
        """The outcome of a readiness probe: None, or why it failed."""
        if error != self.probe_error:
            level = logging.INFO if error is None else logging.WARNING
            log.log(level, "Triton %s %s", self.url, "synthesizes" if error is None else f"cannot synthesize: {error}")
        self.probe_error = error


def gateway_name() -> str:
    """This gateway process, as its `tts` requests name it (c.GATEWAY_PARAMETER): its host and pid."""
    return f"{socket.gethostname()}/{os.getpid()}"


class NoBackend(ConnectionError):
    """No Triton server to send a request to: DNS names none, or all are draining."""


def choose(backends: list[Backend]) -> Backend:
    """The backend with the least outstanding work among those ready, else among those
    up, else of all (a stream to a server that is down fails at once, and one that just
    came back is used before the next health poll notices); never one draining."""
    open_ = [b for b in backends if not b.draining]
    candidates = [b for b in open_ if b.ready] or [b for b in open_ if b.up] or open_
    if not candidates:
        raise NoBackend("no Triton server to send it to (none found in DNS, or all are leaving)")
    return min(candidates, key=lambda b: b.outstanding)


def connect(url: str) -> Backend:
    """A backend for the server at `url`, its channel opened lazily by gRPC."""
    return Backend(url, grpcclient.InferenceServerClient(url, channel_args=CHANNEL_ARGS))


class Backends:
    def __init__(self, urls: tuple[str, ...]) -> None:
        self.all = [connect(url) for url in urls]

    def update(self, urls: Iterable[str]) -> None:
        """The servers are `urls` now (what DNS says): one new is added, and takes requests
        once it is up and probed (`choose`); one gone drains; one back stops draining."""
        urls = list(dict.fromkeys(urls))
        for backend in self.all:
            backend.drain(backend.url not in urls)
        known = {b.url for b in self.all}
        for url in urls:
            if url not in known:
                log.info("Triton %s found in DNS: it takes requests once it is up and has passed its probe", url)
                self.all.append(connect(url))

    async def close_drained(self) -> None:
        """Forget the backends that drained and whose last request ended, and close their
        channels."""
        drained = [b for b in self.all if b.draining and not b.outstanding]
        if drained:
            self.all = [b for b in self.all if b not in drained]
            log.info("Triton %s drained: channel closed", ", ".join(b.url for b in drained))
            await asyncio.gather(*(b.triton.close() for b in drained))

    def _counted(self) -> list[Backend]:
        """The servers admission counts: up, not draining, and measured (one that has not
        measured yet says nothing of what it sustains, and is left out, with its streams)."""
        return [b for b in self.all if b.up and not b.draining and b.capacity]

    @property
    def capacity(self) -> float | None:
        """Real-time streams the servers counted sustain together; None while none has
        measured its own."""
        return sum(b.capacity for b in self._counted()) or None

    @property
    def elsewhere(self) -> int:
        """Streams the servers counted serve for other gateways, as they said last."""
        return sum(b.elsewhere for b in self._counted())

    def acquire(self) -> Backend:
        backend = choose(self.all)
        backend.outstanding += 1
        return backend

    @staticmethod
    def release(backend: Backend) -> None:
        backend.outstanding -= 1

    async def poll(self) -> None:
        """Close the channels of those drained; ask every other backend whether it is
        ready, at once; a hung one counts as down."""
        await self.close_drained()

        async def ready(backend: Backend) -> None:
            try:
                up = await backend.triton.is_server_ready(client_timeout=1)
            except Exception as e:  # unreachable, refusing or hung: down, whatever the cause
                backend.mark(False, str(e).splitlines()[0] if str(e) else type(e).__name__)
                return
            backend.mark(up, "" if up else "not ready")

        await asyncio.gather(*(ready(b) for b in self.all))

    async def close(self) -> None:
        """Close every server's gRPC channel (streams on it end)."""
        await asyncio.gather(*(b.triton.close() for b in self.all))

