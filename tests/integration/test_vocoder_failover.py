"""A vocoder instance lost mid-paragraph, on a real tritonserver: its stub stopped for 3 s
(SIGSTOP, then SIGCONT) or killed (SIGKILL) by pid. The lost window is issued again and
lands on another instance, so the stream ends as it would have, with the same audio, a
little late; the server serves on after, and its supervisor replaces the lost instance
by reloading the vocoder, without stopping Triton."""

import os
import re
import signal
import threading
import time
from collections.abc import Callable

import numpy as np
import psutil
import pytest

from contract import models as c
from operations.loopback import free_ports
from operations.process_tree import model_of
from operations.supervisor import TritonServer
from operations.triton_client import Stream
from perf.tools.metrics import Stream as Timing
from perf.tools.workloads import workload
from tests.audio import snr_db
from tests.servers import running

# Repeatable audio: a seed and no noise.
PARAGRAPH = {c.TEXT: workload("paragraph"), c.SEED: np.array([7], np.int64),
             c.NOISE_SCALE: np.array([0.0], np.float32), c.NOISE_W: np.array([0.0], np.float32)}
FAULT_AT_CHUNK = 1  # the fault comes when the stream is least ahead of its listener
RATE = 22050


def speak(url: str, fault: Callable[[], None] | None = None) -> tuple[np.ndarray, Timing]:
    """The paragraph's PCM through `tts` and its arrival times; `fault` is started in a
    thread once FAULT_AT_CHUNK chunks are in. An error response raises."""
    stream = Stream(url)
    timing = Timing(sent=0.0)
    pcm: list[np.ndarray] = []
    try:
        stream.send(c.TTS_MODEL, PARAGRAPH)
        while not (response := stream.next(timeout=120)).final:
            if (chunk := response.get(c.PCM)) is None:  # the capacity, said last
                continue
            pcm.append(chunk)
            timing.arrivals.append((response.seconds, sum(p.size for p in pcm) / RATE))
            if fault is not None and len(pcm) == FAULT_AT_CHUNK:
                threading.Thread(target=fault).start()
    finally:
        stream.close(cancel=True)  # after the final response nothing is in flight; after a failure, what is
    return np.concatenate(pcm), timing


def stop_for_3_s(stub: psutil.Process) -> Callable[[], None]:
    def fault() -> None:
        stub.send_signal(signal.SIGSTOP)
        time.sleep(3)
        try:
            stub.send_signal(signal.SIGCONT)
        except psutil.NoSuchProcess:  # killed meanwhile, as tts fences a stub Triton found unhealthy
            pass

    return fault


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    """A Triton of the module's own, supervised as speechstream-triton does: each fault
    leaves it whole again, the supervisor having replaced the lost instance."""
    log_dir = tmp_path_factory.mktemp("vocoder-failover")
    with running(TritonServer(*free_ports(3)), log_dir, supervised=True) as server:
        yield server


def vocoder_stubs(server: TritonServer) -> set[psutil.Process]:
    return {stub for stub in server.stubs() if model_of(stub) == c.VOCODER_MODEL}


@pytest.mark.parametrize("fault", ["stopped for 3 s", "killed"])
def test_a_lost_vocoder_instance_costs_the_stream_a_little_time_not_its_audio(triton, fault):
    url = triton.grpc_url
    speak(url)  # warm: the first stream's calls set the deadlines
    reference, unfaulted = speak(url)
    stub, tritonserver, instances = triton.stub(c.VOCODER_MODEL), triton.process, len(vocoder_stubs(triton))
    logged = os.path.getsize(triton.log_path)  # what this test's fault adds to the log
    pcm, faulted = speak(url, stop_for_3_s(stub) if fault == "stopped for 3 s" else stub.kill)
    time.sleep(3.5)  # a stopped stub continued by now, if it still can
    after, _ = speak(url)  # the server serves on, the stub's late answer never seen
    # The supervisor replaced the lost instance by reloading the vocoder, Triton left running.
    deadline = time.monotonic() + 60
    while (len(vocoder_stubs(triton)) != instances or stub in vocoder_stubs(triton)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(vocoder_stubs(triton)) == instances and stub not in vocoder_stubs(triton)
    assert triton.process is tritonserver and triton.fault() is None

    assert snr_db(reference, pcm) >= 40 and snr_db(reference, after) >= 40
    added_s = faulted.stall_free_start_s - unfaulted.stall_free_start_s
    print(f"{fault}: L_sf {unfaulted.stall_free_start_s:.2f} s unfaulted, {faulted.stall_free_start_s:.2f} s "
          f"faulted (+{added_s:.2f} s); SNR {snr_db(reference, pcm):.1f} dB")
    assert added_s <= 1.0
    with open(triton.log_path, "rb") as log_file:
        log_file.seek(logged)
        log = log_file.read().decode(errors="replace")
    # A reloaded model's instances are named by its load too: vocoder_0_1, vocoder_r2_0_1.
    assert "issuing it again" in log and re.search(r"vocoder_(r\d+_)?0_", log)
    assert triton.process.poll() is None
