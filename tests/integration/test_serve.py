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

from operations.loopback import free_ports, stop, wait_for_http
from operations.process_tree import alive, stub_of
from operations.shared_memory import SHM_PREFIX
from perf.tools.workloads import workload
from speechstream.client import SpeechClient, SpeechError
from speechstream.protocol import PROTOCOL_PATH, SERVER_DRAINING, SYNTHESIS_FAILED

STOP_ROUNDS = 2  # of 20 paragraphs at once, before the SIGTERM


def test_sigterm_with_streams_playing_ends_each_done_then_stops_both_unloading_every_model(tmp_path):
    """SIGTERM while three paragraphs play: each ends `done` with its whole audio, a new
    stream is refused `server_draining`, and then Triton stops with every model unloaded
    in seconds, leaving no process and no shared memory. Before the SIGTERM, many streams
    (the gateway's gRPC streams to `tts` all ended): cancelling each gRPC stream once its
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

        url = f"ws://127.0.0.1:{gateway}{PROTOCOL_PATH}"

        async def speak():
            async with await SpeechClient.connect(url) as client:
                return len([frame async for frame in client.speak(workload("paragraph"))])

        async def rounds():
            for _ in range(STOP_ROUNDS):
                assert all(frames > 10 for frames in await asyncio.gather(*(speak() for _ in range(20))))

        asyncio.run(rounds())
        triton, stubs = triton_tree(serve)
        regions = {a for p in stubs for a in p.cmdline() if a.startswith(SHM_PREFIX)}
        frames, late = asyncio.run(stopped_while_playing(url, serve, 3))
        assert late == SERVER_DRAINING
        assert all(ended == "done" and whole for ended, whole in frames), frames
        assert serve.wait(60) == 0
        log = log_path.read_text()
        assert "did not stop within" not in log and "never unloads" not in log, log[-3000:]
        assert log.count("successfully unloaded") == 3, log[-3000:]
        assert not [p for p in (triton, *stubs) if psutil.pid_exists(p.pid) and alive(p)]
        assert regions and not [r for r in regions if Path("/dev/shm", r).exists()]
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2)
    finally:
        if serve.poll() is None:
            stop(serve, timeout=60)  # SIGTERM first: a killed serve would leave its Triton running


async def stopped_while_playing(url: str, serve: subprocess.Popen, streams: int) -> tuple[list, str]:
    """`streams` paragraphs at once, SIGTERM to `serve` once each has audio, and a new
    stream asked for meanwhile: how each paragraph ended (`done` or its error code, and
    whether its frames cover the audio `done` reported), and the new stream's error code."""
    async def paragraph(started: asyncio.Event) -> tuple[str, bool]:
        async with await SpeechClient.connect(url) as client:
            context, frames = client.context(), 0
            await context.speak(workload("paragraph"))
            try:
                async for event in context.events():
                    frames += event.frame is not None
                    started.set()
            except SpeechError as e:
                return e.code, False
            if context.done is None:
                return "closed", False
            return "done", frames * client.ready["frame_ms"] == pytest.approx(context.done["audio_ms"], abs=20)

    async def refused() -> str:
        async with await SpeechClient.connect(url) as client:
            try:
                await client.speak("Too late.").__anext__()
            except SpeechError as e:
                return e.code
        return "spoken"

    started = [asyncio.Event() for _ in range(streams)]
    playing = [asyncio.ensure_future(paragraph(e)) for e in started]
    await asyncio.gather(*(e.wait() for e in started))
    serve.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.5)  # the gateway has begun to drain
    late = await refused()  # while the paragraphs play: once they end, the gateway stops listening
    return list(await asyncio.gather(*playing)), late


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
    return stub_of(triton_tree(serve)[1], "vocoder")


def await_log(log_path: Path, line: str, count: int, limit: float) -> None:
    """Wait until `line` is in the log `count` times."""
    started = time.monotonic()
    while log_path.read_text().count(line) < count:
        assert time.monotonic() - started < limit, f"{line!r} not logged {count} times within {limit} s"
        time.sleep(0.2)


def test_recovers_from_a_killed_tritonserver_and_lost_stubs_then_stops_in_15_s_leaving_nothing(tmp_path):
    """The supervisor in speechstream-serve restarts Triton when tritonserver dies, and
    replaces a vocoder instance lost mid-stream (stopped for 3 s, which tts fences by
    killing it) or killed by reloading the vocoder; the gateway finds it again. Then
    SIGTERM, with a vocoder instance just killed again, stops it all within 15 s, though
    Triton never unloads a model one of whose stubs died, and not even a zombie of its
    processes, nor their shared memory, is left."""
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
        triton.kill()
        assert seconds_until_it_speaks(url, 30) < 30
        triton, stubs = triton_tree(serve)
        seen |= {triton.pid, *(s.pid for s in stubs)}
        assert asyncio.run(stop_mid_stream(url, vocoder_stub(serve), 3)) in ("done", SYNTHESIS_FAILED)
        await_log(log_path, "vocoder is whole again", 1, 30)  # the next kill hits the new instances
        seen |= {p.pid for p in triton_tree(serve)[1]}
        vocoder_stub(serve).kill()
        assert seconds_until_it_speaks(url, 10) < 10
        await_log(log_path, "vocoder is whole again", 2, 30)
        seen |= {p.pid for p in triton_tree(serve)[1]}
        regions = {a for p in triton_tree(serve)[1] if alive(p) for a in p.cmdline() if a.startswith(SHM_PREFIX)}
        vocoder_stub(serve).kill()  # the stop comes before the supervisor replaces it
        stopping = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0
        log = log_path.read_text()
        print(f"stopped in {time.monotonic() - stopping:.1f} s after the faults")
        assert time.monotonic() - stopping <= 15, log[-3000:]
        assert "restarting tritonserver" in log and log.count("reloading vocoder") >= 2
        assert not [pid for pid in seen if psutil.pid_exists(pid)]  # zombies too: serve reaps what Triton did not
        assert not [r for r in regions if Path("/dev/shm", r).exists()]
    finally:
        if serve.poll() is None:
            stop(serve, timeout=60)
