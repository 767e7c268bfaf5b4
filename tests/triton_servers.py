"""A real tritonserver for a test module or session: started on its log, ready, then stopped."""

import contextlib
from collections.abc import Iterator
from pathlib import Path

from operations.supervisor import TritonServer


@contextlib.contextmanager
def running(server: TritonServer, log_dir: Path, timeout_s: float = 120.0) -> Iterator[TritonServer]:
    """`server` started with its output in `log_dir`/tritonserver.log and ready, its
    `grpc_url` and `log_path` set; stopped after (what `stop` reports is `server.stopped`)."""
    with (log_dir / "tritonserver.log").open("w") as log:
        server.start(stdout=log)
        try:
            server.wait_ready(timeout_s)
        except Exception:
            server.stop()
            raise RuntimeError(f"tritonserver did not start; see {log.name}") from None
        server.grpc_url = f"127.0.0.1:{server.grpc_port}"
        server.log_path = log.name
        try:
            yield server
        finally:
            server.stopped = server.stop()
