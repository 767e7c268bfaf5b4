"""What every tier shares: the /dev/shm guard, each test marked by its tier (its folder),
and the real servers the integration, vllm and browser tiers speak to."""

from pathlib import Path

import pytest

from operations.loopback import free_ports
from operations.supervisor import TritonServer
from tests.servers import Gateways, running
from tests.voices import build_german_voice, build_trio_voice

pytest_plugins = ["tests.shm_guard", "tests.pages"]

TIERS = ("unit", "integration", "vllm", "browser")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(item.path).relative_to(Path(__file__).parent).parts[0]
        if tier in TIERS:
            item.add_marker(tier)


@pytest.fixture(scope="session")
def voices_dir(tmp_path_factory):
    """A voices directory with a second voice built from the embedded one, and a
    multi-speaker voice (tests/voices.py)."""
    return build_trio_voice(build_german_voice(tmp_path_factory.mktemp("voices")))


@pytest.fixture(scope="session")
def triton(tmp_path_factory, voices_dir):
    """A real tritonserver on free loopback ports, serving model_repository/ with the
    embedded voice and the voices of `voices_dir`, and the speech recognizer; supervised
    as speechstream-serve runs it, so a stub lost to Triton 2.51's own faults (its Python
    stub now and then aborts on a corrupted heap under concurrent BLS calls) costs the
    suite a restart, not every test after it."""
    server = TritonServer(*free_ports(3), voices=str(voices_dir), listen=True)
    with running(server, tmp_path_factory.mktemp("triton"), supervised=True) as server:
        yield server


@pytest.fixture(scope="session")
def gateway(triton, tmp_path_factory, voices_dir):
    """`speechstream-gateway` on a free loopback port, talking to the test Triton. No
    readiness probes: tests count Triton's inferences, and a probe's would be among them
    (tests/integration/test_triton_faults.py runs gateways that probe). No admission: tests
    open more streams at once than this machine sustains, to test other limits
    (test_admission.py and test_gateway_floods.py run gateways that admit)."""
    with Gateways(tmp_path_factory.mktemp("gateway")) as started:
        yield started.start(
            triton.grpc_url, "--probe-interval", "0", "--admission-load", "0", "--voices", str(voices_dir)
        ).url


@pytest.fixture
def gateways(tmp_path):
    """Gateway processes a test starts with its own flags (`gateways.start(triton_url,
    *flags)`), stopped at its end."""
    with Gateways(tmp_path) as started:
        yield started


@pytest.fixture(scope="module")
def module_gateways(tmp_path_factory):
    """Gateway processes shared by a module's tests, stopped after its last."""
    with Gateways(tmp_path_factory.mktemp("gateways")) as started:
        yield started
