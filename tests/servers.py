"""Real servers for a test: a tritonserver (supervised or not) and gateway processes,
each started on its own log in a test's directory, ready, and stopped after; an HTTP
server standing in for one of Triton's services."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from subprocess import Popen

from operations.loopback import start_gateway, stop
from operations.supervisor import TritonServer
from speechstream import protocol as v1


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """An HTTP server on a free loopback port whose requests `handler` answers; its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def running(
    server: TritonServer, log_dir: Path, timeout_s: float = 120.0, supervised: bool = False, stop_timeout_s: float = 30.0
) -> Iterator[TritonServer]:
    """`server` started with its output in `log_dir`/tritonserver.log and ready, its
    `grpc_url` and `log_path` set; with `supervised`, restarted as speechstream-triton does
    while in use. Stopped after (what `stop` reports is `server.stopped`); a test that
    kills a stub stops it with a short `stop_timeout_s` (a dead stub holds a graceful stop)."""
    stopping = threading.Event()
    supervisor = threading.Thread(target=server.supervise, args=(stopping,), daemon=True)
    with (log_dir / "tritonserver.log").open("w") as log:
        server.start(stdout=log)
        try:
            server.wait_ready(timeout_s)
        except Exception:
            server.stop(timeout=stop_timeout_s)
            raise RuntimeError(f"tritonserver did not start; see {log.name}") from None
        server.grpc_url = f"127.0.0.1:{server.grpc_port}"
        server.log_path = log.name
        if supervised:
            supervisor.start()
        try:
            yield server
        finally:
            stopping.set()
            if supervisor.is_alive():
                supervisor.join()  # a restart under way ends first
            server.stopped = server.stop(timeout=stop_timeout_s)


def shutdown_log(server: TritonServer) -> str:
    """What Triton's log (from `running`) says from its stop signal on: the models it
    waited for, and those it unloaded."""
    text = Path(server.log_path).read_text(errors="replace")
    return text[text.rfind("Signal ("):] if "Signal (" in text else "(no stop signal in the log)"


@dataclass
class Gateway:
    """A `speechstream-gateway` process on a loopback port."""

    process: Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        """Its protocol-v1 WebSocket URL."""
        return f"ws://127.0.0.1:{self.port}{v1.PROTOCOL_PATH}"

    @property
    def http(self) -> str:
        """Its HTTP base URL."""
        return f"http://127.0.0.1:{self.port}"


class Gateways:
    """Gateway processes started for a test, each logging to `log_dir`/NAME.log, all
    stopped at the end of the `with` block (or of the fixture that holds it)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Gateways:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def start(self, triton_urls: str, *flags: str, name: str = "gateway", **options) -> Gateway:
        """A gateway on `triton_urls` with `flags`, once /readyz answers (see `start_gateway`
        for `options`); stopped (SIGTERM, then SIGKILL) at the end unless the test stopped it."""
        log = self._stack.enter_context((self.log_dir / f"{name}.log").open("w"))
        process, port = start_gateway(triton_urls, log, *flags, **options)
        self._stack.callback(lambda: process.poll() is None and stop(process))
        return Gateway(process, port, Path(log.name))
