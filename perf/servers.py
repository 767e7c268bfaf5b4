"""Servers on free loopback ports, for the tests and the benchmarks: the gateway as a
subprocess, readiness polling, and Triton's Prometheus metrics."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from typing import IO

from prometheus_client.parser import text_string_to_metric_families

from python_backends.launcher import PROJECT_ROOT


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def wait_for_http(url: str, process: subprocess.Popen, timeout: float, log_path=None) -> bytes:
    """Poll `url` until it answers 200 and return the body; fail if `process` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.read()
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"no answer from {url}; see {log_path}") from None
            time.sleep(0.1)


def start_gateway(triton_urls: str, log: IO, *flags: str, port: int | None = None) -> tuple[subprocess.Popen, int]:
    """`python -m gateway.server` on `port` (or a free one), once /healthz answers (Triton ready)."""
    port = port or free_ports(1)[0]
    cmd = [sys.executable, "-m", "gateway.server", "--port", str(port), "--triton-urls", triton_urls, *flags]
    process = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_for_http(f"http://127.0.0.1:{port}/healthz", process, 30, getattr(log, "name", None))
    return process, port


def stop(process: subprocess.Popen, timeout: float = 10) -> int:
    """SIGTERM, then SIGKILL after `timeout`; the exit code."""
    process.terminate()
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def triton_metrics(port: int, host: str = "127.0.0.1") -> dict[str, float]:
    """Triton's Prometheus samples, summed over labels (models, instances)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for point in family.samples:
            totals[point.name] = totals.get(point.name, 0.0) + point.value
    return totals
