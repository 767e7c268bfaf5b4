"""`speechstream-triton`: run Triton Inference Server on the model repository, without Docker.

The `nvidia-pytriton` wheel carries a real `tritonserver` and the Python backend. This
assembles a backend directory from it (with the stub built for this Python), derives
the voice's stage graphs into the cache, starts the server with this environment's
packages on the stub's path, waits until it is ready, and stops it cleanly on SIGINT
or SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .voice import cache_dir, load_voice

log = logging.getLogger("speechstream.triton")

PROJECT_ROOT = Path(__file__).resolve().parents[1]
MODEL_REPOSITORY = PROJECT_ROOT / "model_repository"


def pytriton_dir() -> Path:
    import pytriton

    return Path(pytriton.__file__).parent


def tritonserver_binary() -> Path:
    return pytriton_dir() / "tritonserver" / "bin" / "tritonserver"


def backend_directory() -> Path:
    """A backend directory holding the Python backend with this Python's stub."""
    source = pytriton_dir() / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = source / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise RuntimeError(f"nvidia-pytriton has no Python backend stub for Python {version}")
    target = cache_dir() / "backends" / f"python{version}"
    python = target / "python"
    if not (python / "triton_python_backend_stub").exists():
        python.mkdir(parents=True, exist_ok=True)
        for f in (source / "backends" / "python").iterdir():
            if f.is_file():
                shutil.copy2(f, python / f.name)
        shutil.copy2(stub, python / stub.name)
    return target


def server_environment() -> dict[str, str]:
    """The environment for tritonserver and its Python stubs.

    The stubs run the system's libpython in isolated mode, which ignores PYTHONPATH, so
    the model shims put SPEECHSTREAM_PYTHONPATH (the project and this environment's
    packages) on sys.path themselves; the server needs the wheel's own libraries.
    """
    env = dict(os.environ)
    libs = pytriton_dir().parent / "nvidia_pytriton.libs"
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
    paths = [str(PROJECT_ROOT)] + [p for p in sys.path if p.endswith("site-packages")]
    env["SPEECHSTREAM_PYTHONPATH"] = os.pathsep.join(paths)
    return env


@dataclass
class TritonServer:
    """A tritonserver process on the given ports."""

    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    host: str = "127.0.0.1"
    model_repository: Path = MODEL_REPOSITORY
    log_verbose: int = 0
    process: subprocess.Popen | None = field(default=None, init=False)

    def command(self) -> list[str]:
        return [
            str(tritonserver_binary()),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backend_directory()}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            "--allow-cpu-metrics=true",
            "--exit-on-error=true",
            f"--log-verbose={self.log_verbose}",
        ]

    def start(self, stdout=None) -> None:
        load_voice()  # derive the graphs once here, not in three model processes at once
        log.info("starting %s", " ".join(self.command()))
        self.process = subprocess.Popen(self.command(), env=server_environment(), stdout=stdout, stderr=subprocess.STDOUT)

    def is_ready(self) -> bool:
        url = f"http://{self.host}:{self.http_port}/v2/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Poll readiness until the server is ready; raise if it exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited with code {self.process.returncode} while starting")
            if self.is_ready():
                return
            time.sleep(0.25)
        raise TimeoutError(f"tritonserver not ready after {timeout:.0f} s on port {self.http_port}")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, which makes Triton drain and unload; SIGKILL after `timeout`."""
        if self.process is None or self.process.poll() is not None:
            return 0 if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("tritonserver did not stop within %.0f s; killing it", timeout)
            self.process.kill()
            return self.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="speechstream-triton", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("TRITON_HOST", "127.0.0.1"), help="address to bind (env TRITON_HOST)")
    parser.add_argument("--http-port", type=int, default=int(os.environ.get("TRITON_HTTP_PORT", 8000)), help="env TRITON_HTTP_PORT")
    parser.add_argument("--grpc-port", type=int, default=int(os.environ.get("TRITON_GRPC_PORT", 8001)), help="env TRITON_GRPC_PORT")
    parser.add_argument("--metrics-port", type=int, default=int(os.environ.get("TRITON_METRICS_PORT", 8002)), help="env TRITON_METRICS_PORT")
    parser.add_argument("--model-repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument("--log-verbose", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    server = TritonServer(args.http_port, args.grpc_port, args.metrics_port, args.host, args.model_repository, args.log_verbose)
    stopping = False

    def stop(signum, _frame):
        # Only signal here: the main thread is waiting on the process, and Triton drains
        # in-flight requests (up to its 30 s exit timeout) before it exits.
        nonlocal stopping
        stopping = True
        log.info("received %s; stopping tritonserver", signal.Signals(signum).name)
        server.process.terminate()

    server.start()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        server.wait_ready()
    except (RuntimeError, TimeoutError) as e:
        log.error("%s", e)
        server.stop()
        return 1
    log.info("ready: gRPC %s:%d, HTTP %s:%d, metrics %s:%d", args.host, args.grpc_port, args.host, args.http_port, args.host, args.metrics_port)
    code = server.process.wait()
    return 0 if stopping else code


if __name__ == "__main__":
    sys.exit(main())
