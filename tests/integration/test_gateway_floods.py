"""Floods against a gateway over the real Triton: the slow-loris, and one address that
takes more than its share. A normal client from another address must be served all the
while. Clients come from distinct loopback addresses (perf/gateway/floods.py), as they would
from distinct hosts. How fast the normal client is served beside the flood is measured
by `python -m perf.gateway.fairness`, not here."""

import socket
import time

import numpy as np
import psutil
import pytest
import websockets.sync.client

from gateway.settings import Settings
from operations.loopback import triton_metrics
from perf.gateway import floods
from perf.tools.workloads import harvard_sentences
from speechstream import protocol as v1
from speechstream.client import SyncSpeechClient
from tests.audio import snr_db
from tests.integration.test_gateway_metrics import scrape, value

HEAD_S = 3.0
DEFAULTS = Settings()


def speak_once(port: int) -> tuple[int, dict]:
    """One sentence from the normal client: (audio frames, the `done` message)."""
    with SyncSpeechClient.connect(f"ws://127.0.0.1:{port}{v1.PROTOCOL_PATH}", format="pcm_s16le") as client:
        frames = sum(1 for _ in client.speak("A normal client is served all the while."))
        return frames, client.done


@pytest.fixture
def flooded(triton, gateways):
    return gateways.start(triton.grpc_url, "--probe-interval", "0", "--header-timeout", str(HEAD_S))


def test_a_slow_loris_of_500_connections_neither_starves_others_nor_fills_the_log(flooded):
    """500 connections from 250 addresses, each sending the start of a request head: the
    normal client is served meanwhile, the gateway cuts every one of them after the
    header timeout, and its log stays small."""
    gateway = psutil.Process(flooded.process.pid)
    fds_before = gateway.num_fds()
    held = floods.slow_heads(flooded.port, [f"127.0.1.{i + 1}" for i in range(250)], per_source=2)
    started = time.monotonic()
    frames, done = speak_once(flooded.port)
    assert frames > 0 and done["audio_ms"] > 1000
    closed = sum(sock.recv(1) == b"" for sock in held)  # blocks until the gateway closes each
    assert closed == 500 and time.monotonic() - started < HEAD_S + 20
    for sock in held:
        sock.close()
    time.sleep(0.5)
    assert gateway.num_fds() <= fds_before + 5
    assert flooded.log_path.stat().st_size < 1_000_000


def test_one_greedy_address_is_capped_and_the_others_are_served(flooded):
    """From one address: 20 WebSocket clients that ask for speech and never read, then 100
    concurrent speech POSTs. The address gets its connections up to the cap and 429s past
    it; the normal client from another address speaks, and the gateway's memory grows by
    less than 1 MB per stream the address holds (after a first utterance has loaded what
    any needs). A stream's own working set (resampler, Opus encoder, gRPC call, one chunk
    of PCM) is about 0.75 MB on this machine, readers and non-readers alike: what a
    non-reader is sent waits in buffers of bounded size."""
    speak_once(flooded.port)
    gateway = psutil.Process(flooded.process.pid)
    rss_before = gateway.memory_info().rss
    greedy = "127.0.0.2"
    readers = floods.non_reading_websockets(flooded.port, greedy, 20, "Never read. " * 200)
    posts = floods.speech_posts(flooded.port, greedy, 100, "Greedy. " * 50)
    frames, done = speak_once(flooded.port)
    assert frames > 0 and done["audio_ms"] > 1000
    statuses = [floods.status(sock) for sock in posts]
    # The address's connections: 20 WebSockets, then POSTs up to the cap; 429 past it.
    assert statuses.count(429) >= 100 - (DEFAULTS.max_connections_per_client - 20)
    assert set(statuses) <= {200, 429}
    assert gateway.memory_info().rss - rss_before < DEFAULTS.max_streams_per_client * 1_000_000
    for sock in readers + posts:
        sock.close()


def triton_active(triton) -> float:
    return triton_metrics(triton.metrics_port)["speechstream_tts_active_requests"]


def paused_streams(gateway) -> float:
    return value(scrape(gateway.url), "speechstream_paused_streams")


def test_a_client_that_stops_reading_pauses_its_stream_which_goes_on_whole_when_it_reads(triton, gateways):
    """A client reads the start of a long text, then nothing: once more than the lead (2 s
    here) is unread, its stream pauses at the next sentence, and Triton makes nothing for
    it. When it reads again, the stream goes on from that sentence to its end: the audio
    a client that read all along heard."""
    gateway = gateways.start(triton.grpc_url, "--probe-interval", "0", "--max-lead", "2")
    text = " ".join(harvard_sentences()[:16])
    # PCM at 8 kHz: the server's buffers hold 12 s of it, so the lead, not they, stops it.
    config = {"format": "pcm_s16le", "sample_rate": 8000, "seed": 7, "noise_scale": 0.0, "noise_w": 0.0}
    with SyncSpeechClient.connect(gateway.url, **config) as client:
        reference = np.frombuffer(b"".join(frame.payload for frame in client.speak(text)), np.int16)

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the client's own buffer holds little of it
    sock.connect(("127.0.0.1", gateway.port))
    ws = websockets.sync.client.connect(gateway.url, sock=sock, max_size=None, max_queue=1, ping_interval=None,
                                        compression=None, legacy=True)  # reads nothing while its queue holds one
    with SyncSpeechClient.over(ws, **config) as client:
        frames = client.speak(text)
        heard = [next(frames).payload for _ in range(5)]  # the start, then nothing for a while
        deadline = time.monotonic() + 30
        while not paused_streams(gateway) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert paused_streams(gateway) == 1
        deadline = time.monotonic() + 10  # its request closed: Triton ends it within a chunk or two
        while triton_active(triton) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert triton_active(triton) == 0
        time.sleep(1)
        assert triton_active(triton) == 0 and paused_streams(gateway) == 1  # and nothing more is asked
        heard += [frame.payload for frame in frames]  # it reads again, to `done`
    pcm = np.frombuffer(b"".join(heard), np.int16)
    assert pcm.size == reference.size and snr_db(reference, pcm) >= 40
    assert paused_streams(gateway) == 0
    assert value(scrape(gateway.url), "speechstream_stream_pauses_total") >= 1
