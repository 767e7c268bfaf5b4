import socket

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
    import subprocess
    import sys
    import time
    import urllib.request

    (port,) = free_ports(1)
    log = (tmp_path_factory.mktemp("gateway") / "gateway.log").open("w")
    cmd = [sys.executable, "-m", "gateway.server", "--port", str(port), "--triton", triton.grpc_url]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"gateway did not start; see {log.name}") from None
            time.sleep(0.1)
    yield f"ws://127.0.0.1:{port}/v1/stream"
    process.terminate()
    process.wait(10)
    log.close()
