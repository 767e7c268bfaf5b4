"""What the benchmark reads around a level: the CPU of each group of server processes
(the gateway, Triton and its stubs by stage, the rest of this shared machine), the
gateway's own timings from its /metrics, and, for --url, the processes behind a URL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import psutil

from operations.loopback import cpu_seconds, triton_metrics

Groups = dict[str, list[psutil.Process]]

SERVER_TIMES = {  # the gateway's own view of where a first packet's time went
    "triton_first_response_ms_mean": "speechstream_triton_first_response_seconds",
    "gateway_ttfp_ms_mean": "speechstream_ttfp_seconds",
}


def gateway_metrics(url: str) -> Callable[[], dict[str, float]]:
    """The gateway's /metrics on the WebSocket's host and port; {} when unreachable."""
    where = urlparse(url)

    def read() -> dict[str, float]:
        try:
            return triton_metrics(where.port or 80, where.hostname or "127.0.0.1")  # any Prometheus endpoint
        except OSError:
            return {}

    return read


def server_times(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """Mean of each SERVER_TIMES histogram over what happened between two scrapes (ms)."""
    out = {}
    for key, name in SERVER_TIMES.items():
        count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        total = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
        out[key] = round(1000 * total / count, 1) if count else None
    return out


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def listening(port: int) -> psutil.Process | None:
    """The local process that accepts connections on `port`, if any."""
    for c in psutil.net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid:
            return psutil.Process(c.pid)
    return None


def found_groups(url: str) -> Groups:
    """For --url: the gateway listening on the URL's port and the tritonserver (with its
    stubs) it is connected to, when they run on this machine; else nothing to measure."""
    gateway = listening(urlparse(url).port or 80)
    if gateway is None:
        return {}
    groups = {"gateway": [gateway]}
    for port in {c.raddr.port for c in gateway.net_connections("tcp") if c.raddr}:
        if (triton := listening(port)) is not None and triton.name() == "tritonserver":
            groups["triton"] = tree(triton.pid)
    return groups


def machine_busy() -> float:
    """CPU seconds all cores spent on anything but idling, since boot."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def cpu_use(before: dict[str, float], after: dict[str, float], wall_s: float, audio_s: float) -> dict:
    """Per group: CPU seconds, cores busy on average, and CPU seconds per audio second;
    "others" is what the rest of this shared machine took meanwhile."""
    used = {name: after[name] - before[name] for name in before}
    used["others"] = max(0.0, used.pop("machine") - sum(used.values()))
    return {
        name: {"cpu_s": round(cpu_s, 2), "cores": round(cpu_s / wall_s, 3),
               "per_audio_s": round(cpu_s / audio_s, 4) if audio_s else None}
        for name, cpu_s in used.items()
    }


def cpu_now(groups: Groups) -> dict[str, float]:
    return {g: cpu_seconds(procs) for g, procs in groups.items()} | {"machine": machine_busy()}


def stage_of(proc: psutil.Process) -> str | None:
    """The model a Python backend stub serves (its command line names the model's
    model.py), "tritonserver" for the server itself, None once it has exited."""
    try:
        script = next((Path(a) for a in proc.cmdline() if Path(a).name == "model.py"), None)
    except psutil.NoSuchProcess:
        return None
    return script.parents[1].name if script else "tritonserver"


def stage_cpu(groups: Groups) -> dict[str, float]:
    """CPU seconds of Triton's running processes by stage, instances of a model added up."""
    stages: dict[str, float] = {}
    for proc in groups.get("triton", []):
        if (stage := stage_of(proc)) is not None:
            stages[stage] = stages.get(stage, 0.0) + cpu_seconds([proc])
    return stages
