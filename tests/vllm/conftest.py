"""The vLLM tier's shared Triton."""

import pytest

from operations.loopback import free_ports
from operations.supervisor import TritonServer
from tests.servers import running
from tests.voices import build_orpheus_model


@pytest.fixture(scope="package")
def ar_triton(tmp_path_factory):
    """One tritonserver for the tier's AR tests (vLLM takes about 40 s to start): the Piper
    chain and the autoregressive family on tests/build_orpheus_model.py's tiny model,
    supervised as speechstream-triton does, so that a fault test leaves it whole again
    (the supervisor replaces a lost instance)."""
    model = str(build_orpheus_model())
    server = TritonServer(*free_ports(3), ar_model=model)
    with pytest.MonkeyPatch.context() as env:
        # An empty vLLM cache, as on a fresh machine: a cached model inspection once hid
        # that the stub ran vLLM's inspection subprocess with a Python without vLLM.
        env.setenv("VLLM_CACHE_ROOT", str(tmp_path_factory.mktemp("vllm-cache")))
        # Triton waits 30 s for a retired instance whose stub died; what it leaves (vLLM's
        # processes, shared memory) stop() kills and removes.
        with running(server, tmp_path_factory.mktemp("ar-triton"), 300, supervised=True, stop_timeout_s=5):
            server.ar_model_dir = model
            yield server
