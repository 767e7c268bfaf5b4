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
