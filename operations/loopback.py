"""Servers on free loopback ports, for the tests and the benchmarks: the gateway as a
subprocess, readiness polling, Triton and the gateway together (`Servers`), the CPU
time of their processes, and Triton's Prometheus metrics."""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

import psutil
from prometheus_client.parser import text_string_to_metric_families

from operations.environment import PROJECT_ROOT
from operations.supervisor import TritonServer
from speechstream import protocol as v1


def free_ports(n: int) -> list[int]:
    """`n` loopback ports free now, below the kernel's ephemeral range: a port the kernel
    just handed out for bind(0) it may hand out again, to one of the many listeners vLLM's
    processes open while Triton starts, before Triton binds it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports: list[int] = []
    while len(ports) < n:
        port = random.randrange(10_000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
    return ports


def wait_for_http(url: str, process: subprocess.Popen, timeout: float, log_path=None, ok_only: bool = True) -> bytes:
    """Poll `url` until it answers 200 (any status, unless `ok_only`) and return the body;
    fail if `process` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            if not ok_only:
                return e.read()
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"no answer from {url}; see {log_path}")
        time.sleep(0.1)


def start_gateway(
    triton_urls: str, log: IO, *flags: str, port: int | None = None, triton_ready: bool = True
) -> tuple[subprocess.Popen, int]:
    """`python -m gateway.server` on `port` (or a free one), once /readyz answers: with
    200 (a Triton can synthesize), or with anything when not `triton_ready`."""
    port = port or free_ports(1)[0]
    cmd = [sys.executable, "-m", "gateway.server", "--port", str(port), "--triton-urls", triton_urls, *flags]
    process = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_for_http(f"http://127.0.0.1:{port}/readyz", process, 30, getattr(log, "name", None), ok_only=triton_ready)
    return process, port


def stop(process: subprocess.Popen, timeout: float = 10) -> int:
    """SIGTERM, then SIGKILL after `timeout`; the exit code. A gateway killed so first
    writes its threads' stacks to its log (SIGUSR1): where its stop got stuck."""
    process.terminate()
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)
        time.sleep(1)
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


def gateway_metric(port: int, name: str, url: str) -> float:
    """A gateway's per-Triton gauge `name` for the Triton at `url`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f'{name}{{url="{url}"}}'):
                return float(line.split()[-1])
    raise LookupError(f"no {name} for {url}")


class Servers:
    """tritonserver and the gateway on free loopback ports, logging into `log_dir`."""

    # Every simulated listener comes from 127.0.0.1: by default, lift the per-address caps.
    ONE_ADDRESS = ("--max-connections-per-client", "1024", "--max-streams-per-client", "0")

    def __init__(self, log_dir: Path, gateway_flags: tuple[str, ...] = ONE_ADDRESS, chat_model: str | None = None,
                 listen: bool = False) -> None:
        """`chat_model`: a chat model directory, or "embedded", for Triton's Thinker and the gateway's chat mode;
        `listen`: the recognizer and the gateway's listen mode."""
        self.gateway_flags = gateway_flags + (("--chat-model", chat_model) if chat_model else ()) + (
            ("--listen",) if listen else ())
        http, grpc, self.metrics_port, self.port = free_ports(4)
        self.triton = TritonServer(http, grpc, self.metrics_port, chat_model=chat_model, listen=listen)
        self.logs = {"gateway": log_dir / "gateway.log", "triton": log_dir / "tritonserver.log"}
        self.gateway: subprocess.Popen | None = None
        self._logs: list[IO] = []
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{v1.PROTOCOL_PATH}"

    def start(self) -> None:
        self._logs = [self.logs["gateway"].open("w"), self.logs["triton"].open("w")]
        self.triton.start(stdout=self._logs[1])
        self.triton.wait_ready(timeout=300)
        self.gateway, self.port = start_gateway(
            f"127.0.0.1:{self.triton.grpc_port}", self._logs[0], *self.gateway_flags
        )

    def supervise(self) -> None:
        """From now until `stop`, restart Triton when it exits or a stub dies, as
        speechstream-serve does."""
        self._supervisor = threading.Thread(target=self.triton.supervise, args=(self._stopping,), daemon=True)
        self._supervisor.start()

    def stop(self) -> dict[str, float | int | None]:
        """Stop both, and report what Triton left behind (it should drain, unload and
        exit; the launcher kills stubs that outlive it and removes their regions)."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()  # a restart under way ends first
        if self.gateway is not None and self.gateway.poll() is None:
            stop(self.gateway)
        stopped = self.triton.stop()
        for f in self._logs:
            f.close()
        return {"triton_stop_s": stopped.seconds, "triton_exit_code": stopped.exit_code,
                "stubs_left_running": stopped.stubs_left_running, "shm_left_after_exit": stopped.shm_left_after_exit}

    def triton_tree(self) -> list[psutil.Process]:
        """tritonserver and its children (one Python backend stub per model instance);
        none while it is gone (a supervised restart)."""
        try:
            root = psutil.Process(self.triton.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []


def cpu_seconds(processes: list[psutil.Process]) -> float:
    """User + system CPU time of these processes (not of their children, which are listed
    themselves), skipping any that have exited."""
    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total
