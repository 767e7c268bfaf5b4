"""`speechstream-serve` (the README's server command): Triton and the gateway together."""

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import websockets

from tests.conftest import free_ports

pytestmark = pytest.mark.triton


def test_serves_speech_and_stops_both_on_sigterm(tmp_path):
    gateway, http, grpc, metrics = free_ports(4)
    cmd = [sys.executable, "-m", "gateway.serve", "--port", str(gateway), "--triton-http-port", str(http),
           "--triton-grpc-port", str(grpc), "--triton-metrics-port", str(metrics)]
    log_path = tmp_path / "serve.log"
    serve = subprocess.Popen(cmd, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{gateway}/healthz", timeout=1) as r:
                    assert json.loads(r.read()) == {"gateway": "ok", "triton": "ready"}
                    break
            except OSError:
                assert serve.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.2)

        async def speak():
            async with websockets.connect(f"ws://127.0.0.1:{gateway}/v1/stream") as ws:
                await ws.send(json.dumps({"type": "speak", "context_id": "c", "text": "Hello."}))
                frames = 0
                while True:
                    m = await ws.recv()
                    if isinstance(m, bytes):
                        frames += 1
                    elif json.loads(m)["type"] == "done":
                        return frames

        assert asyncio.run(speak()) > 10
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2)
    finally:
        if serve.poll() is None:
            serve.kill()
