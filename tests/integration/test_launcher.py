"""`speechstream-triton`: ports from the environment, readiness, clean shutdown."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from operations.environment import GPU_CONFIG, backend_directory, server_environment
from operations.loopback import free_ports
from operations.shared_memory import SHM, remove_unmapped
from tests.processes import shm_mapped_by


def test_backend_directory_holds_the_python_backend_and_this_pythons_stub():
    python = backend_directory() / "python"
    for name in ("libtriton_python.so", "triton_python_backend_utils.py", "triton_python_backend_stub"):
        assert (python / name).is_file()
    assert os.access(python / "triton_python_backend_stub", os.X_OK)


def test_stub_path_names_the_project_and_this_environment():
    paths = server_environment()["SPEECHSTREAM_PYTHONPATH"].split(os.pathsep)
    assert any(p.endswith("site-packages") for p in paths)
    assert any(os.path.isdir(os.path.join(p, "python_backends")) for p in paths)


def test_serves_on_ports_from_the_environment_and_stops_cleanly_on_sigterm(tmp_path):
    """Also with SPEECHSTREAM_GPU=1: Triton takes the GPU config name, and the Piper
    chain, which has no configs/gpu.pbtxt, loads its own config on this CPU."""
    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, TRITON_HTTP_PORT=str(http), TRITON_GRPC_PORT=str(grpc), TRITON_METRICS_PORT=str(metrics),
               SPEECHSTREAM_GPU="1")
    log = (tmp_path / "launcher.log").open("w")
    launcher = subprocess.Popen([sys.executable, "-m", "operations.launcher"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "ready: gRPC" not in (tmp_path / "launcher.log").read_text():
            assert launcher.poll() is None and time.monotonic() < deadline, (tmp_path / "launcher.log").read_text()
            time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready") as r:
            assert r.status == 200
        assert f"--model-config-name={GPU_CONFIG}" in (tmp_path / "launcher.log").read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics") as r:
            assert b"nv_inference_request_success" in r.read()
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(60) == 0
        assert "stopping tritonserver" in (tmp_path / "launcher.log").read_text()
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2)
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_clearing_unmapped_shared_memory_spares_a_live_semaphore_and_removes_a_stray_file():
    """A POSIX semaphore of multiprocessing's spawn context (vLLM's processes open them by
    name) is mapped under the temporary name it was made with: clearing by name would
    remove it from under a server starting beside this one."""
    semaphore = multiprocessing.get_context("spawn").Semaphore()
    name = semaphore._semlock.name.lstrip("/")
    live = SHM / f"sem.{name}"
    stray = SHM / f"speechstream-test-stray-{os.getpid()}"
    stray.write_bytes(b"left by a killed process")
    try:
        assert live.exists() and live.name not in shm_mapped_by([os.getpid()])  # what naming saw
        assert remove_unmapped([live, stray]) == 1
        assert live.exists() and not stray.exists()
    finally:
        stray.unlink(missing_ok=True)
        del semaphore  # its resource tracker unlinks it
