"""Floods against a gateway over the real Triton: the slow-loris, and one address that
takes more than its share. A normal client from another address must be served all the
while. Clients come from distinct loopback addresses (127.0.0.0/8 is all loopback), as
they would from distinct hosts. How fast the normal client is served beside the flood is
measured by `perf/fairness.py`, not here."""

import json
import socket
import time

import psutil
import pytest
from websockets.frames import Frame, Opcode

from gateway.client import SyncSpeechClient
from gateway.settings import Settings
from perf.servers import start_gateway, stop
from python_backends import contract as c

pytestmark = pytest.mark.triton

HEAD_S = 3.0


def speak_once(port: int) -> tuple[int, dict]:
    """One sentence from the normal client: (audio frames, the `done` message)."""
    with SyncSpeechClient.connect(f"ws://127.0.0.1:{port}{c.PROTOCOL_PATH}", format="pcm_s16le") as client:
        frames = sum(1 for _ in client.speak("A normal client is served all the while."))
        return frames, client.done


@pytest.fixture
def flooded(triton, tmp_path):
    log_path = tmp_path / "gateway.log"
    with log_path.open("w") as log:
        process, port = start_gateway(triton.grpc_url, log, "--probe-interval", "0", "--header-timeout", str(HEAD_S))
        process.port, process.log_path = port, log_path
        yield process
        stop(process)


def test_a_slow_loris_of_500_connections_neither_starves_others_nor_fills_the_log(flooded):
    """500 connections from 250 addresses, each sending a request head a byte at a time:
    the normal client is served meanwhile, the gateway cuts every one of them after the
    header timeout, and its log stays small."""
    gateway = psutil.Process(flooded.pid)
    fds_before = gateway.num_fds()
    held = []
    for i in range(500):
        sock = socket.create_connection(("127.0.0.1", flooded.port), timeout=30,
                                        source_address=(f"127.0.1.{i // 2 + 1}", 0))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
        held.append(sock)
    started = time.monotonic()
    frames, done = speak_once(flooded.port)
    assert frames > 0 and done["audio_ms"] > 1000
    for sock in held:
        sock.sendall(b"s")  # still open while its head is incomplete, until the timeout
    closed = sum(sock.recv(1) == b"" for sock in held)  # blocks until the gateway closes each
    assert closed == 500 and time.monotonic() - started < HEAD_S + 20
    for sock in held:
        sock.close()
    time.sleep(0.5)
    assert gateway.num_fds() <= fds_before + 5
    assert flooded.log_path.stat().st_size < 1_000_000


def test_one_greedy_address_is_capped_and_the_others_are_served(flooded):
    """From one address: 20 WebSocket clients that ask for speech and never read, then 100
    concurrent speech POSTs. The address gets its streams up to the cap and 429s past
    it; the normal client from another address speaks, and the gateway's memory grows by
    less than 1 MB per stream the address holds (after a first utterance has loaded what
    any needs). A stream's own working set (resampler, Opus encoder, gRPC call, one chunk
    of PCM) is about 0.75 MB on this machine, readers and non-readers alike: what a
    non-reader is sent waits in buffers of bounded size."""
    speak_once(flooded.port)
    gateway = psutil.Process(flooded.pid)
    rss_before = gateway.memory_info().rss
    greedy = "127.0.0.2"
    readers = []
    for i in range(20):
        sock = socket.create_connection(("127.0.0.1", flooded.port), timeout=30, source_address=(greedy, 0))
        readers.append(sock)
    # Through a raw socket the gateway's answers are never read: a WebSocket handshake,
    # then a masked `speak`, then silence.
    speak = json.dumps({"type": "speak", "context_id": "x", "text": "Never read. " * 200}).encode()
    for sock in readers:
        sock.sendall(b"GET /v1/stream HTTP/1.1\r\nHost: g\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                     + Frame(Opcode.TEXT, speak).serialize(mask=True))
    body = json.dumps({"model": "tts-1", "voice": "alloy", "input": "Greedy. " * 50}).encode()
    posts = []
    for _ in range(100):
        sock = socket.create_connection(("127.0.0.1", flooded.port), timeout=30, source_address=(greedy, 0))
        sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        posts.append(sock)
    frames, done = speak_once(flooded.port)
    assert frames > 0 and done["audio_ms"] > 1000
    statuses = [sock.recv(12)[9:12] for sock in posts]
    # The address's connections: 20 WebSockets, then POSTs up to the cap; 429 past it.
    assert statuses.count(b"429") >= 100 - (Settings().max_connections_per_client - 20)
    assert set(statuses) <= {b"200", b"429"}
    streams = Settings().max_streams_per_client
    assert gateway.memory_info().rss - rss_before < streams * 1_000_000
    for sock in readers + posts:
        sock.close()
