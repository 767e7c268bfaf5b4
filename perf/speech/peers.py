"""The peers a user would pick instead of us, on the same voice, for the benchmark.

Piper's own HTTP server (`piper-tts`, GPL; answers with the whole WAV) and
`wyoming-piper` (streams sentence by sentence over the Wyoming protocol). They live in
the benchmark's own virtual environment, `.venv-peers`, created here on first use and
never a dependency of the server; both are pointed at the embedded voice's files.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from operations.environment import PROJECT_ROOT
from operations.loopback import free_ports, wait_for_http
from python_backends.piper.voice import embedded_voice_files

PEERS_VENV = PROJECT_ROOT / ".venv-peers"
PEER_PACKAGES = ("piper-tts[http]==1.8.0", "wyoming-piper==2.5.2")
PEER_MODULES = "piper.http_server, wyoming_piper.__main__, flask"
START_TIMEOUT_S = 60.0


def peers_python() -> Path:
    """The peers' interpreter, installing them into `.venv-peers` if they are missing."""
    python = PEERS_VENV / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", f"import {PEER_MODULES}"], capture_output=True).returncode == 0:
        return python
    print(f"bench: installing {' '.join(PEER_PACKAGES)} into {PEERS_VENV}", file=sys.stderr, flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", PEERS_VENV], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    return python


def wait_for_tcp(port: int, process: subprocess.Popen, log_path: str | None) -> None:
    """Until something accepts on 127.0.0.1:`port`; fail if `process` exits first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"no server on port {port}; see {log_path}") from None
            time.sleep(0.2)


def start_piper_http(log: IO) -> tuple[subprocess.Popen, str]:
    """`python -m piper.http_server` on a free port; the process and its synthesis URL."""
    port = free_ports(1)[0]
    model, _ = embedded_voice_files()  # its config is found beside it, as model + ".json"
    cmd = [peers_python(), "-m", "piper.http_server", "--host", "127.0.0.1", "--port", str(port), "-m", model]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    wait_for_http(f"http://127.0.0.1:{port}/info", process, START_TIMEOUT_S, getattr(log, "name", None))
    return process, f"http://127.0.0.1:{port}/synthesize"


def start_wyoming_piper(log: IO, work_dir: Path) -> tuple[subprocess.Popen, int]:
    """`python -m wyoming_piper` on a free TCP port, its data dir the voice's own folder
    (it finds `<voice>.onnx` and `.onnx.json` there), downloads (none) into `work_dir`."""
    port = free_ports(1)[0]
    model, _ = embedded_voice_files()
    cmd = [peers_python(), "-m", "wyoming_piper", "--voice", model.name.removesuffix(".onnx"),
           "--data-dir", str(model.parent), "--download-dir", str(work_dir),
           "--uri", f"tcp://127.0.0.1:{port}"]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wait_for_tcp(port, process, getattr(log, "name", None))
    return process, port
