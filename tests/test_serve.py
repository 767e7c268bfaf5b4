"""`speechstream-serve` (the README's server command): Triton and the gateway together."""

import asyncio
import json
import signal
import subprocess
import sys
import urllib.request

import pytest

from gateway.client import SpeechClient
from perf.servers import free_ports, stop, wait_for_http
from python_backends.contract import PROTOCOL_PATH

pytestmark = pytest.mark.triton


def test_serves_speech_and_stops_both_on_sigterm(tmp_path):
    gateway, http, grpc, metrics = free_ports(4)
    cmd = [sys.executable, "-m", "gateway.serve", "--port", str(gateway), "--triton-http-port", str(http),
           "--triton-grpc-port", str(grpc), "--triton-metrics-port", str(metrics)]
    log_path = tmp_path / "serve.log"
    serve = subprocess.Popen(cmd, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    try:
        ready = wait_for_http(f"http://127.0.0.1:{gateway}/readyz", serve, 120, log_path)
        assert json.loads(ready) == {"ready": True, "backends": {f"127.0.0.1:{grpc}": "ready"}}

        async def speak():
            async with await SpeechClient.connect(f"ws://127.0.0.1:{gateway}{PROTOCOL_PATH}") as client:
                return len([frame async for frame in client.speak("Hello.")])

        assert asyncio.run(speak()) > 10
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2)
    finally:
        if serve.poll() is None:
            stop(serve, timeout=60)  # SIGTERM first: a killed serve would leave its Triton running
