import pytest

pytest_plugins = ["tests.shm_guard"]

from perf.servers import free_ports, start_gateway, stop
from operations.supervisor import TritonServer
from tests.triton_servers import running
from tests.voices import build_german_voice, build_trio_voice


@pytest.fixture(scope="session")
def voices_dir(tmp_path_factory):
    """A voices directory with a second voice built from the embedded one, and a
    multi-speaker voice (tests/voices.py)."""
    return build_trio_voice(build_german_voice(tmp_path_factory.mktemp("voices")))


@pytest.fixture(scope="session")
def triton(tmp_path_factory, voices_dir):
    """A real tritonserver on free loopback ports, serving model_repository/ with the
    embedded voice and the voices of `voices_dir`."""
    with running(TritonServer(*free_ports(3), voices=str(voices_dir)), tmp_path_factory.mktemp("triton")) as server:
        yield server


@pytest.fixture(scope="session")
def gateway(triton, tmp_path_factory, voices_dir):
    """`speechstream-gateway` on a free loopback port, talking to the test Triton. No
    readiness probes: tests count Triton's inferences, and a probe's would be among them
    (tests/test_triton_faults.py runs gateways that probe). No admission: tests open more
    streams at once than this machine sustains, to test other limits (tests/test_admission.py
    and test_gateway_floods.py run gateways that admit)."""
    with (tmp_path_factory.mktemp("gateway") / "gateway.log").open("w") as log:
        process, port = start_gateway(
            triton.grpc_url, log, "--probe-interval", "0", "--admission-load", "0", "--voices", str(voices_dir)
        )
        yield f"ws://127.0.0.1:{port}/v1/stream"
        stop(process)
