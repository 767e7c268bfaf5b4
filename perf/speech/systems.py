"""The systems under test: ours (a gateway at --url, or our own Triton and gateway) and
the peers, each as how to open a client on it and its processes by CPU group."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from operations.loopback import Servers, stop
from perf.speech.clients import Connect, GatewayClient, PiperHttpClient, WyomingClient
from perf.speech.goals import OURS
from perf.speech.peers import start_piper_http, start_wyoming_piper
from perf.speech.sampling import Groups, found_groups, gateway_metrics, tree


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


@dataclass
class System:
    """A server under test: how to open a client on it, and its processes by CPU group."""

    name: str
    connect: Connect
    groups: Callable[[], Groups]
    metrics: Callable[[], dict[str, float]] = dict  # the server's Prometheus samples, if it has them
    http_url: str | None = None  # its OpenAI speech API (http://host:port/v1), if it has one


def api_base(url: str) -> str:
    """The OpenAI speech API beside the gateway's WebSocket (ws://host:port/v1/stream)."""
    return url.replace("ws://", "http://", 1).replace("wss://", "https://", 1).rsplit("/v1/", 1)[0] + "/v1"


@contextmanager
def ours(url: str | None, log_dir: Path) -> Iterator[System]:
    """Our gateway at `url`, or our own Triton + gateway, stopped afterwards."""
    if url:
        yield System(OURS, lambda: GatewayClient.connect(url), lambda: found_groups(url), gateway_metrics(url),
                     api_base(url))
        return
    servers = Servers(log_dir)
    try:
        log(f"starting tritonserver and the gateway (logs in {log_dir})")
        servers.start()
        groups = lambda: {"gateway": [psutil.Process(servers.gateway.pid)], "triton": servers.triton_tree()}  # noqa: E731
        yield System(OURS, lambda: GatewayClient.connect(servers.url), groups, gateway_metrics(servers.url),
                     api_base(servers.url))
    finally:
        log("stopping tritonserver and the gateway")
        servers.stop()


@contextmanager
def piper_http(log_dir: Path) -> Iterator[System]:
    with (log_dir / "piper_http.log").open("w") as f:
        log("starting piper.http_server")
        process, url = start_piper_http(f)
        try:
            yield System("piper-http", lambda: PiperHttpClient.connect(url), lambda: {"server": tree(process.pid)})
        finally:
            stop(process)


@contextmanager
def wyoming_piper(log_dir: Path) -> Iterator[System]:
    with (log_dir / "wyoming_piper.log").open("w") as f:
        log("starting wyoming_piper")
        process, port = start_wyoming_piper(f, log_dir)
        try:
            yield System("wyoming-piper", lambda: WyomingClient.connect("127.0.0.1", port), lambda: {"server": tree(process.pid)})
        finally:
            stop(process)
