"""The vLLM tier's shared Triton."""

import pytest

from operations.loopback import free_ports
from operations.supervisor import TritonServer
from tests.servers import running, shutdown_log
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


@pytest.fixture(scope="package")
def chat_triton(tmp_path_factory):
    """One tritonserver for the tier's voice chat tests (protocol v1's chat and listen
    modes, the Realtime API): the embedded SmolLM2 as the Thinker (llama.cpp on a CPU), the
    recognizer and the Piper chain."""
    server = TritonServer(*free_ports(3), chat_model="embedded")
    with running(server, tmp_path_factory.mktemp("chat-triton"), timeout_s=300):
        yield server
    # Every model, the Thinker too, unloads within Triton's exit timeout.
    assert server.stopped.stubs_left_running == 0, f"{server.stopped}\n{shutdown_log(server)}"


@pytest.fixture(scope="module")
def chat_gateway(chat_triton, module_gateways):
    """Chat, and listen mode: a voice chat needs ears (chat_triton serves the recognizer too)."""
    return module_gateways.start(chat_triton.grpc_url, "--probe-interval", "0", "--admission-load", "0",
                                 "--chat-model", "embedded", "--listen", name="chat-gateway").url
