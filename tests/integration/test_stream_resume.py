"""Streams that resume, on a real tritonserver supervised as speechstream-triton does:
the `tts` stub killed by pid mid-paragraph (Triton 2.51 never answers for that model
again, so the supervisor restarts tritonserver). The gateway tells the client
`resuming`, issues the sentences not yet delivered once Triton serves again, and the
stream ends `done`: every sentence heard once, the frames' offsets continuing, the
audio that of the unfaulted stream. A streamed HTTP speech body goes on the same way."""

import asyncio
import json
import urllib.request
from urllib.parse import urlparse

import numpy as np
import pytest

from contract import models as c
from operations.loopback import free_ports
from operations.supervisor import TritonServer
from perf.tools.workloads import workload
from speechstream import protocol as v1
from speechstream.client import connection
from tests.audio import snr_db
from tests.recorder import Recorder
from tests.servers import Gateways, running

RESUME_WITHIN_S = 60  # a restart takes 5-9 s here; a loaded CI machine may take longer
RATE = 24000
FAULT_AT_FRAMES = 25  # 0.5 s into the paragraph: its first request is being spoken
# Repeatable audio for the comparison; the gateway pins a seed itself when a client gives none.
VOICE = {"seed": 7}


@pytest.fixture
def served(tmp_path):
    """A supervised Triton of its own and a gateway on it: (the Triton, the WebSocket URL)."""
    with (
        running(TritonServer(*free_ports(3)), tmp_path, supervised=True, stop_timeout_s=5) as triton,
        Gateways(tmp_path) as gateways,
    ):
        gateway = gateways.start(triton.grpc_url, "--resume-within", str(RESUME_WITHIN_S), "--probe-interval", "1")
        yield triton, gateway.url


async def paragraph(url: str, fault=None) -> Recorder:
    """The paragraph spoken as 16-bit PCM with word timestamps; `fault` is called once
    FAULT_AT_FRAMES frames are in."""
    async with connection(url) as ws:
        client = Recorder(ws)
        await client.until("ready")
        await client.send(type="config", format="pcm_s16le", sample_rate=RATE, timestamps=True)
        await client.until("ready")
        await client.send(type="speak", context_id="c", text=workload("paragraph"), **VOICE)
        while fault is not None and len(client.audio("c")) < FAULT_AT_FRAMES:
            await asyncio.wait_for(client.read(), 60)
        if fault is not None:
            fault()
        await client.until("done", "c", timeout=RESUME_WITHIN_S + 60)
        return client


def pcm(client: Recorder) -> np.ndarray:
    return np.frombuffer(b"".join(f.payload for f in client.audio("c")), np.int16).astype(np.float32)


def test_a_killed_tts_stub_pauses_the_stream_which_then_goes_on_with_every_sentence_once(served):
    triton, url = served
    reference = asyncio.run(paragraph(url))
    tts = triton.stub(c.TTS_MODEL)
    faulted = asyncio.run(paragraph(url, tts.kill))

    (resuming,) = faulted.messages("resuming")
    assert resuming["code"] == v1.BACKEND_UNAVAILABLE and resuming["within_ms"] == RESUME_WITHIN_S * 1000
    assert resuming["audio_ms"] >= FAULT_AT_FRAMES * 20
    assert faulted.messages("error") == []
    frames = faulted.audio("c")
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert [f.sample_offset for f in frames] == [i * RATE // 50 for i in range(len(frames))]  # 20 ms frames
    # Every sentence heard once, in order: one `timestamps` per sentence, as unfaulted.
    spans = [m["text_span"] for m in faulted.messages("timestamps")]
    assert spans == [m["text_span"] for m in reference.messages("timestamps")]
    (done,), (reference_done,) = faulted.messages("done"), reference.messages("done")
    assert abs(done["audio_ms"] - reference_done["audio_ms"]) <= 20
    # The sentence that was cut goes on where it was cut: the same audio as unfaulted.
    ours, theirs = pcm(faulted), pcm(reference)
    n = min(len(ours), len(theirs))
    assert snr_db(theirs[:n], ours[:n]) >= 40
    assert triton.stub(c.TTS_MODEL).pid != tts.pid  # served by the restarted Triton
    arrivals = [e.at for e in faulted.frames("c")]
    print(f"the longest wait between frames: {max(np.diff(arrivals)):.2f} s; SNR {snr_db(theirs[:n], ours[:n]):.1f} dB")


def speech_body(port: int, fault=None) -> bytes:
    """POST /v1/audio/speech for the paragraph as streamed 24 kHz PCM; `fault` is called
    once the first bytes are in."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/audio/speech", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"model": "tts-1", "voice": c.DEFAULT_VOICE, "input": workload("paragraph"),
                         "response_format": "pcm", **VOICE}).encode(),
    )
    with urllib.request.urlopen(request, timeout=RESUME_WITHIN_S + 60) as response:
        body = response.read(FAULT_AT_FRAMES * RATE // 50 * 2)
        if fault is not None:
            fault()
        return body + response.read()


def test_a_streamed_speech_body_goes_on_through_a_killed_tts_stub(served):
    triton, url = served
    port = urlparse(url).port
    reference = speech_body(port)
    tts = triton.stub(c.TTS_MODEL)
    body = speech_body(port, tts.kill)
    assert triton.stub(c.TTS_MODEL).pid != tts.pid
    ours, theirs = (np.frombuffer(b, np.int16).astype(np.float32) for b in (body, reference))
    assert abs(len(ours) - len(theirs)) <= RATE // 50  # every sentence once: the same length, within a frame
    n = min(len(ours), len(theirs))
    assert snr_db(theirs[:n], ours[:n]) >= 40
