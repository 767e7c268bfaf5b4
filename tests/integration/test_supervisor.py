"""The supervisor's reload of a model whose stub died, against real processes and a real
HTTP server standing in for Triton's model control (no tritonserver): a parent that does
not reap its killed child stands in for tritonserver and its retired stub."""

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import psutil
import pytest

from operations.process_tree import alive
from operations.supervisor import RETIRE_AFTER_S, TritonServer
from tests.servers import serving

# A child that runs "code2wav" (its command line names the model's model.py), whose parent
# prints its pid and then never reaps it.
STUB = "import time; time.sleep(60)"
UNREAPING_PARENT = ("import subprocess, sys, time; "
                    f"child = subprocess.Popen([sys.executable, '-c', {STUB!r}, '/models/code2wav/1/model.py']); "
                    "print(child.pid, flush=True); time.sleep(60)")


class ModelControl(BaseHTTPRequestHandler):
    """Triton's model config and load, as `reload` uses them; the loads it was asked for."""

    loads: list[dict] = []

    def do_GET(self):
        self._answer({"name": "code2wav", "instance_group": [{"count": 2, "kind": "KIND_CPU"}]})

    def do_POST(self):
        self.loads.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self._answer({})

    def _answer(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class NeverLoads(ModelControl):
    """A load that never answers, as a load cut short by tritonserver's death was left."""

    def do_POST(self):
        time.sleep(60)


@contextlib.contextmanager
def stand_in(control: type[BaseHTTPRequestHandler], code: str) -> Iterator[TritonServer]:
    """A TritonServer whose model control `control` answers, and whose tritonserver is a
    Python process running `code`."""
    with serving(control) as http_port:
        tritonserver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            server = TritonServer(http_port=http_port)
            server.process = tritonserver
            yield server
        finally:
            tritonserver.kill()
            tritonserver.wait()


def test_a_reload_ends_when_tritonserver_dies_while_it_loads():
    # speechstream-serve's supervisor waited on such a load, not restarting Triton, for
    # the load's 120 s timeout (tests/integration/test_serve.py saw 30 s of it).
    with stand_in(NeverLoads, "import time; time.sleep(60)") as server:
        threading.Timer(1.0, server.process.kill).start()
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="tritonserver exited while loading code2wav"):
            server.reload("code2wav")
        assert time.monotonic() - started < 10


def test_a_reload_does_not_wait_for_tritonserver_to_reap_the_stubs_it_retires():
    # It waited up to 10 s for them to be gone, and a stub that died meanwhile was
    # replaced only then: 6.5 s after its death in tests/vllm/test_ar_faults.py.
    with stand_in(ModelControl, UNREAPING_PARENT) as server:
        stub = psutil.Process(int(server.process.stdout.readline()))
        server._watch([stub])
        started = time.monotonic()
        server.reload("code2wav")
        took_s = time.monotonic() - started
        psutil.wait_procs([stub], timeout=1)  # the SIGKILL lands; the zombie stays
        assert stub.status() == psutil.STATUS_ZOMBIE and not alive(stub)  # killed, not yet reaped
        assert took_s < RETIRE_AFTER_S + 5  # not the 10 s it waited for the reaping
        config = json.loads(ModelControl.loads[-1]["parameters"]["config"])
        assert [group["name"] for group in config["instance_group"]] == ["code2wav_r1_0"]  # new instances' names
