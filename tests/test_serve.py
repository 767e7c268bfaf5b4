"""`speechstream-serve` (the README's server command): Triton and the gateway together."""

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from client.speech import SpeechClient, SpeechError
from perf.servers import free_ports, stop, wait_for_http
from perf.workloads import workload
from contract.protocol import PROTOCOL_PATH, SYNTHESIS_FAILED
from operations.launcher import SHM_PREFIX, alive, stub_running

pytestmark = pytest.mark.triton
STOP_ROUNDS = 2  # of 20 paragraphs at once, before the SIGTERM


def test_serves_speech_and_stops_both_on_sigterm_unloading_every_model(tmp_path):
    """After many streams (the gateway's gRPC streams to `tts` all ended), SIGTERM stops
    Triton with every model unloaded in seconds. Cancelling each gRPC stream once its
    final response was in left Triton holding `tts` now and then, and its unload then
    waited out the 30 s exit timeout until Triton was killed."""
    gateway, http, grpc, metrics = free_ports(4)
    cmd = [sys.executable, "-m", "operations.serve", "--port", str(gateway), "--triton-http-port", str(http),
           "--triton-grpc-port", str(grpc), "--triton-metrics-port", str(metrics), "--admission-load", "0"]
    log_path = tmp_path / "serve.log"
    serve = subprocess.Popen(cmd, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    try:
        ready = wait_for_http(f"http://127.0.0.1:{gateway}/readyz", serve, 120, log_path)
        assert json.loads(ready) == {"ready": True, "draining": False, "backends": {f"127.0.0.1:{grpc}": "ready"}}

        async def speak():
            async with await SpeechClient.connect(f"ws://127.0.0.1:{gateway}{PROTOCOL_PATH}") as client:
                return len([frame async for frame in client.speak(workload("paragraph"))])

        async def rounds():
            for _ in range(STOP_ROUNDS):
                assert all(frames > 10 for frames in await asyncio.gather(*(speak() for _ in range(20))))

        asyncio.run(rounds())
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0
        log = log_path.read_text()
        assert "did not stop within" not in log and log.count("successfully unloaded") == 3, log[-3000:]
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2)
    finally:
        if serve.poll() is None:
            stop(serve, timeout=60)  # SIGTERM first: a killed serve would leave its Triton running


def triton_tree(serve: subprocess.Popen) -> tuple[psutil.Process, list[psutil.Process]]:
    """The tritonserver that `speechstream-serve` runs, and its stubs."""
    (triton,) = [p for p in psutil.Process(serve.pid).children() if "tritonserver" in p.name()]
    return triton, triton.children(recursive=True)


async def speaks(url: str) -> bool:
    """Whether a short text is spoken whole within 10 s."""
    try:
        async with asyncio.timeout(10), await SpeechClient.connect(url) as client:
            return len([frame async for frame in client.speak("Hello.")]) > 10
    except (SpeechError, OSError, TimeoutError):
        return False


def seconds_until_it_speaks(url: str, limit: float) -> float:
    started = time.monotonic()
    while not asyncio.run(speaks(url)):
        assert time.monotonic() - started < limit, f"not speaking {limit} s after the fault"
        time.sleep(0.2)
    return time.monotonic() - started


async def stop_mid_stream(url: str, stub: psutil.Process, seconds: float) -> str:
    """Stop `stub` (SIGSTOP) for `seconds` while a long text streams, then continue it;
    how the stream ended: `done` or its error code."""
    async with asyncio.timeout(60), await SpeechClient.connect(url) as client:
        context = client.context()
        await context.speak(workload("long"))
        events = 0
        try:
            async for _ in context.events():
                events += 1
                if events == 20:
                    stub.send_signal(signal.SIGSTOP)
                    await asyncio.sleep(seconds)
                    stub.send_signal(signal.SIGCONT)
        except SpeechError as e:
            return e.code
        return "done"


def vocoder_stub(serve: subprocess.Popen) -> psutil.Process:
    """One of the vocoder's live instances."""
    return stub_running(triton_tree(serve)[1], "vocoder")


def test_recovers_from_stopped_and_killed_stubs_and_a_killed_tritonserver_and_leaves_nothing(tmp_path):
    """The supervisor in speechstream-serve restarts Triton when a stub dies (Triton 2.51
    never answers for that model again; a stub stopped for 3 s and continued ends in a
    crash) or tritonserver itself dies; the gateway finds it again. After the stop, none
    of its processes and no shared memory of theirs remain."""
    gateway, http, grpc, metrics = free_ports(4)
    cmd = [sys.executable, "-m", "operations.serve", "--port", str(gateway), "--triton-http-port", str(http),
           "--triton-grpc-port", str(grpc), "--triton-metrics-port", str(metrics),
           "--stage-timeout", "3", "--probe-interval", "1"]
    log_path = tmp_path / "serve.log"
    serve = subprocess.Popen(cmd, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    url = f"ws://127.0.0.1:{gateway}{PROTOCOL_PATH}"
    seen = set()
    try:
        wait_for_http(f"http://127.0.0.1:{gateway}/readyz", serve, 120, log_path)
        triton, stubs = triton_tree(serve)
        seen |= {triton.pid, *(s.pid for s in stubs)}
        assert asyncio.run(stop_mid_stream(url, vocoder_stub(serve), 3)) in ("done", SYNTHESIS_FAILED)
        assert seconds_until_it_speaks(url, 20) < 20
        triton, stubs = triton_tree(serve)
        seen |= {triton.pid, *(s.pid for s in stubs)}
        vocoder_stub(serve).kill()
        assert seconds_until_it_speaks(url, 10) < 10
        triton, stubs = triton_tree(serve)
        seen |= {triton.pid, *(s.pid for s in stubs)}
        triton.kill()
        assert seconds_until_it_speaks(url, 30) < 30
        seen |= {p.pid for p in triton_tree(serve)[1]}
        regions = {a for p in triton_tree(serve)[1] for a in p.cmdline() if a.startswith(SHM_PREFIX)}
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0
        assert "restarting tritonserver" in log_path.read_text()
        assert not [pid for pid in seen if psutil.pid_exists(pid) and alive(psutil.Process(pid))]
        assert not [r for r in regions if Path("/dev/shm", r).exists()]
    finally:
        if serve.poll() is None:
            stop(serve, timeout=60)
