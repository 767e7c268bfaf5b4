"""The gateway over real WebSockets on loopback, in front of a real tritonserver."""

import asyncio
import json
import random
import signal
import socket
import time
import urllib.error
import urllib.request

import av
import numpy as np
import opuslib
import psutil
import pytest
import soxr
import websockets

from contract import models as c
from contract.voices import EMBEDDED
from gateway.conversation.audio import G711_CODECS
from operations.triton_client import inference_count, stream
from perf.tools.workloads import workload
from speechstream import protocol as v1
from speechstream.client import SpeechClient, connection
from tests.integration.test_triton_faults import active_tts_requests
from tests.recorder import Recorder

IDLE_S = 1.5
BUFFERED_BYTES = 16 * 1024


@pytest.fixture(scope="module")
def impatient(triton, module_gateways):
    return module_gateways.start(triton.grpc_url, "--idle-timeout", str(IDLE_S), name="impatient")


SEND_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def drops_non_readers(triton, module_gateways):
    return module_gateways.start(
        triton.grpc_url, "--max-buffered-bytes", str(BUFFERED_BYTES), "--send-timeout", str(SEND_TIMEOUT_S),
        "--probe-interval", "0", name="drops_non_readers",
    )


@pytest.fixture(scope="module")
def small_buffers(triton, module_gateways):
    return module_gateways.start(
        # No probes: the test counts inferences.
        triton.grpc_url, "--max-buffered-bytes", str(BUFFERED_BYTES), "--probe-interval", "0", name="small_buffers"
    )


def decode_opus(frames, rate, frame_ms=20):
    decoder = opuslib.Decoder(rate, 1)
    n = rate * frame_ms // 1000
    return np.concatenate([np.frombuffer(decoder.decode(f.payload, n), "<i2") for f in frames]).astype(np.float32) / 32767


def decode_pcm(frames):
    return np.concatenate([np.frombuffer(f.payload, "<i2") for f in frames]).astype(np.float32) / 32767


def aligned_correlation(signal, reference, max_lag):
    lags = range(max_lag)
    n = min(signal.size - max_lag, reference.size)
    best = max(lags, key=lambda k: float(np.dot(signal[k : k + n], reference[:n])))
    return float(np.corrcoef(signal[best : best + n], reference[:n])[0, 1])


def test_speak_gives_opus_matching_tritons_pcm(gateway, triton):
    text, seed = workload("short"), 5

    async def run():
        async with connection(gateway) as ws:
            client = Recorder(ws)
            ready = await client.until("ready")
            assert ready["format"] == "opus" and ready["sample_rate"] == 48000 and ready["frame_ms"] == 20
            await client.send(type="config", seed=seed)
            await client.until("ready")
            await client.send(type="speak", context_id="c1", text=text)
            done = await client.until("done", "c1")
            return client, done

    client, done = asyncio.run(run())
    frames = client.audio("c1")
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert [f.sample_offset for f in frames] == [i * 960 for i in range(len(frames))]
    assert [f.last for f in frames] == [False] * (len(frames) - 1) + [True]
    decoded = decode_opus(frames, 48000)
    pcm = np.concatenate([r.get(c.PCM) for r in stream(triton.grpc_url, c.TTS_MODEL, {c.TEXT: text, c.SEED: np.int64(seed)})])
    reference = soxr.resample(pcm, EMBEDDED.sample_rate, 48000)
    assert abs(decoded.size - reference.size) <= 960
    assert 0 <= decoded.size * 1000 / 48000 - done["audio_ms"] <= 20  # the last frame is padded
    assert aligned_correlation(decoded, reference, max_lag=960) >= 0.99


@pytest.mark.parametrize("fmt", ["mulaw", "alaw"])
def test_telephony_gets_8_khz_g711_matching_tritons_pcm(gateway, triton, fmt):
    text, seed = workload("short"), 5

    async def run():
        async with connection(gateway) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await client.send(type="config", format=fmt, seed=seed)
            ready = await client.until("ready")
            await client.send(type="speak", context_id="c1", text=text)
            return ready, client.audio("c1") if await client.until("done", "c1") else None

    ready, frames = asyncio.run(run())
    assert (ready["format"], ready["sample_rate"], ready["pre_skip"]) == (fmt, 8000, 0)
    assert [f.sample_offset for f in frames] == [i * 160 for i in range(len(frames))]
    decoder = av.CodecContext.create(G711_CODECS[fmt], "r")
    decoder.sample_rate, decoder.layout = 8000, "mono"
    decoded = np.concatenate([x.to_ndarray()[0] for f in frames for x in decoder.decode(av.Packet(f.payload))]) / 32768
    pcm = np.concatenate([r.get(c.PCM) for r in stream(triton.grpc_url, c.TTS_MODEL, {c.TEXT: text, c.SEED: np.int64(seed)})])
    reference = soxr.resample(pcm, EMBEDDED.sample_rate, 8000)
    assert abs(decoded.size - reference.size) <= 160
    assert aligned_correlation(decoded, reference, max_lag=8) >= 0.98  # sample-aligned, within G.711's companding


def test_contexts_on_one_socket_speak_with_their_own_voice_parameters(gateway):
    text = workload("short")

    async def run():
        async with await SpeechClient.connect(gateway, format="pcm_s16le", length_scale=1.0) as client:
            slow, fast = client.context(), client.context()
            await slow.speak(text, length_scale=1.5, seed=3)
            await fast.speak(text, voice="alloy", length_scale=0.75, seed=3)
            for context in (slow, fast):
                async for _ in context.events():
                    pass
            again = [frame async for frame in client.speak(text, length_scale=1.5, seed=3)]
            return slow.done["audio_ms"], fast.done["audio_ms"], sum(len(f.payload) for f in again) // 2 * 1000 // 48000

    slow_ms, fast_ms, again_ms = asyncio.run(run())
    assert abs(again_ms - slow_ms) <= 20  # SpeechClient.speak passes them on too (20 ms: the padded last frame)
    assert 1.5 < slow_ms / fast_ms < 2.3  # 1.5 / 0.75 = 2, less the frames rounding keeps; 1 if the config ruled


def test_text_deltas_give_the_same_audio_and_start_before_the_last_delta(gateway):
    text, seed = workload("paragraph"), 9
    rng = random.Random(1)

    async def speak(deltas):
        async with connection(gateway) as ws:
            client = Recorder(ws)
            await client.send(type="config", format="pcm_s16le", sample_rate=24000, seed=seed)
            await client.until("ready")
            await client.until("ready")
            reader = asyncio.create_task(client.until("done", "c1"))
            if deltas:
                i = 0
                while i < len(text):
                    n = rng.randint(3, 10)
                    last_sent = await client.send(type="text", context_id="c1", text=text[i : i + n])
                    i += n
                    await asyncio.sleep(0.01)
                await client.send(type="close", context_id="c1")
            else:
                last_sent = await client.send(type="speak", context_id="c1", text=text)
            await reader
            return client, last_sent

    whole, _ = asyncio.run(speak(deltas=False))
    pieces, last_delta = asyncio.run(speak(deltas=True))
    a, b = decode_pcm(whole.audio("c1")), decode_pcm(pieces.audio("c1"))
    assert abs(a.size - b.size) <= 480
    n = min(a.size, b.size)
    assert np.corrcoef(a[:n], b[:n])[0, 1] >= 0.999
    first_audio = pieces.frames("c1")[0].at
    assert first_audio < last_delta


def test_cancel_stops_one_context_while_another_plays_to_its_end(gateway, triton):
    async def run():
        async with connection(gateway) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await client.send(type="speak", context_id="long", text=workload("long"))
            await client.send(type="speak", context_id="short", text=workload("short"))
            while len(client.audio("long")) < 10:
                await asyncio.wait_for(client.read(), 30)
            cancel_sent = await client.send(type="cancel", context_id="long")
            await client.until("cancelled", "long")
            done = await client.received("done", "short")
            await asyncio.sleep(0.5)  # anything still coming for "long" would arrive now
            while True:
                try:
                    await asyncio.wait_for(client.read(), 0.2)
                except TimeoutError:
                    break
            return client, cancel_sent, done

    client, cancel_sent, done = asyncio.run(run())
    # The cancel reached Triton: no vocoder work goes on for the cancelled text.
    settled = inference_count(triton.grpc_url, c.VOCODER_MODEL)
    time.sleep(1.0)
    assert inference_count(triton.grpc_url, c.VOCODER_MODEL) == settled
    long_frames = client.frames("long")
    assert long_frames[-1].at - cancel_sent <= 0.1
    assert not long_frames[-1].frame.last
    assert not client.frames(None)  # no frame came after `cancelled` ended its stream
    short = client.audio("short")
    assert short[-1].last and 0 <= len(short) * 20 - done["audio_ms"] <= 20


def test_timestamps_cover_every_word_in_order_and_end_with_the_audio(gateway):
    from python_backends.piper.timing import text_words

    text = workload("paragraph") + " It cost $42, said Dr. Jones."

    async def run():
        async with connection(gateway) as ws:
            client = Recorder(ws)
            await client.send(type="config", timestamps=True)
            await client.until("ready")
            await client.send(type="speak", context_id="c1", text=text)
            done = await client.until("done", "c1")
            return client.messages("timestamps"), done

    messages, done = asyncio.run(run())
    words = [w for m in messages for w in m["words"]]
    starts = [t for m in messages for t in m["start_ms"]]
    ends = [t for m in messages for t in m["end_ms"]]
    assert all(m["context_id"] == "c1" for m in messages) and len(messages) >= 8
    assert words == [m.group() for m in text_words(text)]
    assert all(a < b for a, b in zip(starts, ends))
    assert starts == sorted(starts) and ends == sorted(ends)
    assert all(b <= a for a, b in zip(starts[1:], ends[:-1]))  # words do not overlap
    assert 0 <= done["audio_ms"] - ends[-1] <= 100


def test_flush_delivers_the_buffered_text_and_keeps_the_context_open(gateway):
    async def run():
        async with connection(gateway) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await client.send(type="text", context_id="c1", text="Hello there, this is")
            await client.send(type="flush", context_id="c1")
            await client.until("flushed", "c1")
            flushed_frames = len(client.audio("c1"))
            await client.send(type="text", context_id="c1", text=" the second part.")
            await client.send(type="close", context_id="c1")
            done = await client.until("done", "c1")
            return client, flushed_frames, done

    client, flushed_frames, done = asyncio.run(run())
    frames = client.audio("c1")
    assert flushed_frames > 50  # the flushed text's audio came before `flushed`
    assert not any(f.last for f in frames[:flushed_frames])
    assert [f.sample_offset for f in frames] == [i * 960 for i in range(len(frames))]
    assert len(frames) > flushed_frames + 30 and frames[-1].last
    assert 0 <= len(frames) * 20 - done["audio_ms"] <= 20


def test_a_speaking_connection_is_not_idle(impatient):
    """Speaking a long text for longer than the idle timeout, with no message meanwhile,
    is not idle (tests/integration/test_gateway_limits.py shows silent connections closed)."""

    async def run():
        async with connection(impatient.url) as ws:
            talker = Recorder(ws)
            await talker.until("ready")
            await talker.send(type="speak", context_id="c1", text=workload("long"))
            await asyncio.sleep(2 * IDLE_S)
            await talker.send(type="cancel", context_id="c1")  # still open, still speaking
            return await talker.until("cancelled", "c1")

    assert asyncio.run(run())["type"] == "cancelled"


def test_a_client_that_stops_reading_pauses_its_synthesis(small_buffers, triton):
    """With the socket's buffers full, the context stops taking text, so Triton's vocoder
    goes idle well before the text is spoken; reading again finishes it whole."""
    text = workload("long")  # about 108 s of speech

    async def run():
        sock = socket.create_connection(("127.0.0.1", small_buffers.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        gateway = psutil.Process(small_buffers.process.pid)
        async with connection(small_buffers.url, sock=sock) as ws:
            client = Recorder(ws)
            await client.until("ready")
            before = inference_count(triton.grpc_url, c.VOCODER_MODEL)
            rss_before = gateway.memory_info().rss
            await client.send(type="speak", context_id="c1", text=text)
            counts = [0]
            deadline = time.monotonic() + 90
            while len(counts) < 4 or counts[-1] != counts[-4]:  # not reading, until 3 s without vocoding
                assert time.monotonic() < deadline, f"synthesis never paused: {counts}"
                await asyncio.sleep(1)
                counts.append(inference_count(triton.grpc_url, c.VOCODER_MODEL) - before)
            rss_paused = gateway.memory_info().rss
            done = await client.until("done", "c1", timeout=120)
            total = inference_count(triton.grpc_url, c.VOCODER_MODEL) - before
            return counts, total, done, client.audio("c1"), rss_paused - rss_before

    counts, total, done, frames, rss_growth = asyncio.run(run())
    assert counts[-1] > 0 and counts[-1] < 0.6 * total  # paused well before the end
    assert done["audio_ms"] > 90_000 and frames[-1].last and [f.seq for f in frames] == list(range(len(frames)))
    assert rss_growth < 20 * 2**20


def test_a_client_that_reads_nothing_is_dropped_and_nobody_else_notices(drops_non_readers, triton):
    """Its synthesis pauses once its buffers are full; after the send timeout its
    connection is dropped and its Triton work ends, while another client speaks."""

    async def run():
        sock = socket.create_connection(("127.0.0.1", drops_non_readers.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        async with connection(drops_non_readers.url, sock=sock) as ws:
            reader = Recorder(ws)
            await reader.until("ready")
            await reader.send(type="speak", context_id="c1", text=workload("long"))
            started = time.monotonic()
            async with connection(drops_non_readers.url) as other:
                bystander = Recorder(other)
                await bystander.until("ready")
                await bystander.send(type="speak", context_id="b", text="Meanwhile, I speak.")
                done = await bystander.until("done", "b", timeout=30)
            await asyncio.sleep(max(0.0, SEND_TIMEOUT_S + 3 - (time.monotonic() - started)))
            with pytest.raises(websockets.ConnectionClosed):
                await reader.until("done", "c1", timeout=30)  # what was buffered, then the reset
        deadline = time.monotonic() + 10
        while active_tts_requests(triton.metrics_port) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return done, active_tts_requests(triton.metrics_port)

    done, active = asyncio.run(run())
    assert done["audio_ms"] > 0 and active == 0


def test_sigterm_past_the_drain_closes_each_websocket_with_1001_and_the_gateway_exits_cleanly(triton, gateways):
    """Shutdown as aiohttp runs it, once the drain's bound has passed (`--drain 0` here): on SIGTERM
    the gateway closes a WebSocket mid-stream with 1001 (going away), the stream's Triton
    work stops, and the process exits 0 once its background tasks (health watch,
    admission queue) are awaited."""
    gateway = gateways.start(triton.grpc_url, "--probe-interval", "0", "--drain", "0")
    process = gateway.process

    async def run():
        async with connection(gateway.url) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await client.send(type="speak", context_id="long", text=workload("long"))
            while len(client.audio("long")) < 3:
                await asyncio.wait_for(client.read(), 30)
            process.send_signal(signal.SIGTERM)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(client.read(), 10)
            return closed.value.rcvd

    received = asyncio.run(run())
    assert (received.code, received.reason) == (1001, "server shutting down")
    assert process.wait(10) == 0
    deadline = time.monotonic() + 10
    while active_tts_requests(triton.metrics_port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert active_tts_requests(triton.metrics_port) == 0
    assert "closing 1 WebSockets" in gateway.log_path.read_text()


def test_sigterm_drains_a_speaking_stream_to_done_refusing_new_ones_then_closes_with_1001(triton, gateways):
    """A rolling update cuts no stream: on SIGTERM the gateway says it is not ready,
    refuses new streams with `server_draining` (connect again, elsewhere), lets the
    stream it is speaking end `done` with all its audio, then closes with 1001 and exits 0."""
    gateway = gateways.start(triton.grpc_url, "--probe-interval", "0", "--drain", "60")
    process, port, url = gateway.process, gateway.port, gateway.url

    async def run():
        async with connection(url) as speaking_ws, connection(url) as other_ws:
            speaking, other = Recorder(speaking_ws), Recorder(other_ws)
            await speaking.until("ready")
            await other.until("ready")
            await speaking.send(type="speak", context_id="p", text=workload("paragraph"))
            while len(speaking.audio("p")) < 3:
                await asyncio.wait_for(speaking.read(), 30)
            process.send_signal(signal.SIGTERM)
            readiness = await asyncio.to_thread(wait_for_draining, port)
            await other.send(type="speak", context_id="late", text="Too late.")
            refused = await other.until("error", "late")
            done = await speaking.until("done", "p")
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(speaking.read(), 10)
            return readiness, refused, done, speaking.audio("p"), closed.value.rcvd

    readiness, refused, done, frames, close = asyncio.run(run())
    assert readiness == (503, True)
    assert refused["code"] == v1.SERVER_DRAINING and "retry_after_ms" in refused
    assert done["audio_ms"] == pytest.approx(len(frames) * 20, abs=20)  # every frame, the stream whole
    assert (close.code, close.reason) == (1001, "server shutting down")
    assert process.wait(10) == 0


def wait_for_draining(port: int, timeout_s: float = 5) -> tuple[int, bool]:
    """/readyz's status and `draining` once the gateway says it is draining."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                status, body = response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            status, body = e.code, json.loads(e.read())
        if body["draining"] or time.monotonic() > deadline:
            return status, body["draining"]
        time.sleep(0.02)
