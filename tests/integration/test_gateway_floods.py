"""Floods against a gateway over the real Triton: the slow-loris, and one address that
takes more than its share. A normal client from another address must be served all the
while. Clients come from distinct loopback addresses (perf/gateway/floods.py), as they would
from distinct hosts. How fast the normal client is served beside the flood is measured
by `python -m perf.gateway.fairness`, not here."""

import time

import psutil
import pytest

from gateway.settings import Settings
from perf.gateway import floods
from speechstream import protocol as v1
from speechstream.client import SyncSpeechClient

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
