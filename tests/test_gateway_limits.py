"""The gateway's limits and access control, each set low on a gateway of its own, and
backpressure on a client that does not read."""

import asyncio
import json
import socket
import time
import urllib.request

import psutil
import pytest
import websockets

from gateway import protocol as p
from perf.servers import start_gateway, stop
from perf.workloads import workload
from python_backends import contract as c
from python_backends.triton_client import inference_count

from .wsclient import Client

pytestmark = pytest.mark.triton

KEY = "s3cret-key"
ORIGIN = "http://app.example"
PER_CLIENT = 3
MESSAGE_BYTES = 4096
IDLE_S = 1.5
BUFFERED_BYTES = 16 * 1024


@pytest.fixture(scope="module")
def limited(triton, tmp_path_factory):
    flags = [
        "--api-key", KEY, "--allowed-origins", ORIGIN, "--max-connections-per-client", str(PER_CLIENT),
        "--max-message-bytes", str(MESSAGE_BYTES), "--idle-timeout", str(IDLE_S),
        "--max-buffered-bytes", str(BUFFERED_BYTES),
    ]
    with (tmp_path_factory.mktemp("limited") / "gateway.log").open("w") as log:
        process, port = start_gateway(triton.grpc_url, log, *flags)
        process.port = port
        yield process
        stop(process)


def url(gateway, query=""):
    return f"ws://127.0.0.1:{gateway.port}{p.PATH}{query}"


def connect(gateway, query="", headers=None, origin=None, **kwargs):
    headers = {"X-API-Key": KEY} if headers is None else headers
    return websockets.connect(url(gateway, query), additional_headers=headers, origin=origin, max_size=None, **kwargs)


def refusal(gateway, **kwargs) -> int | None:
    """The HTTP status that refused the handshake, or None if it was accepted."""

    async def run():
        try:
            async with connect(gateway, **kwargs):
                return None
        except websockets.InvalidStatus as e:
            return e.response.status_code

    return asyncio.run(run())


@pytest.mark.parametrize("kwargs,status", [
    ({"headers": {}}, 401),
    ({"headers": {"X-API-Key": "wrong"}}, 401),
    ({"headers": {"Authorization": "Bearer wrong"}}, 401),
    ({"headers": {}, "query": "?api_key=wrong"}, 401),
    ({"headers": {"X-API-Key": KEY}}, None),
    ({"headers": {"Authorization": f"Bearer {KEY}"}}, None),
    ({"headers": {}, "query": f"?api_key={KEY}"}, None),
    ({"origin": "http://evil.example"}, 403),
    ({"origin": ORIGIN}, None),
])
def test_api_key_and_origin(limited, kwargs, status):
    assert refusal(limited, **kwargs) == status


def test_health_and_page_need_no_key(limited):
    for path in ("/healthz", "/"):
        with urllib.request.urlopen(f"http://127.0.0.1:{limited.port}{path}", timeout=5) as r:
            assert r.status == 200


def test_connections_per_client_address_are_capped(limited):
    async def run():
        held = [await connect(limited) for _ in range(PER_CLIENT)]
        with pytest.raises(websockets.InvalidStatus) as refused:
            await connect(limited)
        await held.pop().close()
        async with connect(limited) as again:
            assert json.loads(await again.recv())["type"] == "ready"
        for ws in held:
            await ws.close()
        return refused.value.response.status_code

    assert asyncio.run(run()) == 429


def test_a_large_message_gets_an_error_and_an_abusive_one_closes_the_connection(limited):
    async def run():
        async with connect(limited) as ws:
            client = Client(ws)
            await client.until("ready")
            await client.send(type="speak", context_id="big", text="word " * (MESSAGE_BYTES // 5 + 1))
            error = await client.until("error")
            await client.send(type="speak", context_id="ok", text="Still here.")
            await client.until("done", "ok")
            await ws.send("x" * (16 * MESSAGE_BYTES + 1))
            with pytest.raises(websockets.ConnectionClosedError):
                await client.until("never", timeout=10)
            return error["code"], ws.protocol.close_rcvd.code

    assert asyncio.run(run()) == (p.MESSAGE_TOO_LARGE, 1009)


def test_an_idle_connection_is_closed_but_a_speaking_one_is_not(limited):
    async def run():
        started = time.monotonic()
        async with connect(limited) as idle, connect(limited) as busy:
            talker = Client(busy)
            await talker.until("ready")
            await talker.send(type="speak", context_id="c1", text=workload("paragraph"))
            messages = [json.loads(m) async for m in idle]  # until the server closes it
            closed_after = time.monotonic() - started
            await talker.until("done", "c1")  # synthesis outlasts IDLE_S; the socket stays
            return messages, closed_after, idle.protocol.close_rcvd.code

    messages, closed_after, code = asyncio.run(run())
    assert [m["type"] for m in messages] == ["ready", "error"] and messages[1]["code"] == p.IDLE_TIMEOUT
    assert IDLE_S <= closed_after < IDLE_S + 2 and code == 1000


def test_a_client_that_stops_reading_pauses_its_synthesis(limited, triton):
    """With the socket's buffers full, the context stops taking text, so Triton's vocoder
    goes idle well before the text is spoken; reading again finishes it whole."""
    text = workload("long")  # about 108 s of speech

    async def run():
        sock = socket.create_connection(("127.0.0.1", limited.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        gateway = psutil.Process(limited.pid)
        async with connect(limited, sock=sock) as ws:
            client = Client(ws)
            await client.until("ready")
            before = inference_count(triton.grpc_url, c.VOCODER_MODEL)
            rss_before = gateway.memory_info().rss
            await client.send(type="speak", context_id="c1", text=text)
            counts = []
            for _ in range(8):  # not reading
                await asyncio.sleep(1)
                counts.append(inference_count(triton.grpc_url, c.VOCODER_MODEL) - before)
            rss_paused = gateway.memory_info().rss
            done = await client.until("done", "c1", timeout=120)
            total = inference_count(triton.grpc_url, c.VOCODER_MODEL) - before
            return counts, total, done, client.audio("c1"), rss_paused - rss_before

    counts, total, done, frames, rss_growth = asyncio.run(run())
    assert counts[-1] == counts[-4] > 0  # paused: no vocoder work for the last 3 s
    assert counts[-1] < 0.6 * total
    assert done["audio_ms"] > 90_000 and frames[-1].last and [f.seq for f in frames] == list(range(len(frames)))
    assert rss_growth < 20 * 2**20
