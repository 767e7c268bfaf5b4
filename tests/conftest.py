import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from python_backends.launcher import TritonServer


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def wait_for_http(url: str, process: subprocess.Popen, log_path, timeout: float) -> bytes:
    """Poll `url` until it answers 200 and return the body; fail if `process` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.read()
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"no answer from {url}; see {log_path}") from None
            time.sleep(0.1)


@pytest.fixture(scope="session")
def triton(tmp_path_factory):
    """A real tritonserver on free loopback ports, serving model_repository/."""
    http, grpc, metrics = free_ports(3)
    server = TritonServer(http, grpc, metrics)
    log = (tmp_path_factory.mktemp("triton") / "tritonserver.log").open("w")
    server.start(stdout=log)
    try:
        server.wait_ready()
    except Exception:
        server.stop()
        raise RuntimeError(f"tritonserver did not start; see {log.name}") from None
    server.grpc_url = f"127.0.0.1:{grpc}"
    server.log_path = log.name
    yield server
    server.stop()
    log.close()


@pytest.fixture(scope="session")
def gateway(triton, tmp_path_factory):
    """`speechstream-gateway` on a free loopback port, talking to the test Triton."""
    (port,) = free_ports(1)
    log = (tmp_path_factory.mktemp("gateway") / "gateway.log").open("w")
    cmd = [sys.executable, "-m", "gateway.server", "--port", str(port), "--triton", triton.grpc_url]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    wait_for_http(f"http://127.0.0.1:{port}/healthz", process, log.name, timeout=30)
    yield f"ws://127.0.0.1:{port}/v1/stream"
    process.terminate()
    process.wait(10)
    log.close()
