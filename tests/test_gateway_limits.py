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

from gateway.client import Recorder
from perf.servers import start_gateway, stop
from perf.workloads import workload
from python_backends import contract as c
from python_backends.triton_client import inference_count

pytestmark = pytest.mark.triton

KEY = "s3cret-key"
ORIGIN = "http://app.example"
PER_CLIENT = 3
MESSAGE_BYTES = 4096
IDLE_S = 1.5
BUFFERED_BYTES = 16 * 1024


def gateway_with(triton, tmp_path_factory, *flags):
    with (tmp_path_factory.mktemp("limited") / "gateway.log").open("w") as log:
        process, port = start_gateway(triton.grpc_url, log, *flags)
        process.port = port
        yield process
        stop(process)


@pytest.fixture(scope="module")
def limited(triton, tmp_path_factory):
    yield from gateway_with(
        triton, tmp_path_factory,
        "--api-key", KEY, "--allowed-origins", ORIGIN, "--max-connections-per-client", str(PER_CLIENT),
        "--max-message-bytes", str(MESSAGE_BYTES), "--max-buffered-bytes", str(BUFFERED_BYTES),
    )


@pytest.fixture(scope="module")
def impatient(triton, tmp_path_factory):
    yield from gateway_with(triton, tmp_path_factory, "--api-key", KEY, "--idle-timeout", str(IDLE_S))


def url(gateway, query=""):
    return f"ws://127.0.0.1:{gateway.port}{c.PROTOCOL_PATH}{query}"


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


def test_a_key_given_twice_is_refused_not_an_error(limited):
    assert refusal(limited, headers=[("X-API-Key", KEY), ("X-API-Key", KEY)]) == 401
    assert refusal(limited, headers=[("Authorization", f"Bearer {KEY}"), ("Authorization", "Bearer x")]) == 401


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
            client = Recorder(ws)
            await client.until("ready")
            await client.send(type="speak", context_id="big", text="word " * (MESSAGE_BYTES // 5 + 1))
            error = await client.until("error")
            await client.send(type="speak", context_id="ok", text="Still here.")
            await client.until("done", "ok")
            await ws.send("x" * (16 * MESSAGE_BYTES + 1))
            with pytest.raises(websockets.ConnectionClosedError):
                await client.until("never", timeout=10)
            return error["code"], ws.protocol.close_rcvd.code

    assert asyncio.run(run()) == (c.MESSAGE_TOO_LARGE, 1009)


def test_idle_connections_are_closed_but_a_speaking_one_is_not(impatient):
    """Silent, and silent with a context left open with nothing to say: both are closed.
    Speaking a long text (minutes of audio, read slowly) for longer than that is not idle."""

    async def closed(ws):
        messages = [json.loads(m) async for m in ws]  # until the server closes it
        return messages, ws.protocol.close_rcvd.code

    async def run():
        started = time.monotonic()
        async with connect(impatient) as silent, connect(impatient) as forgotten, connect(impatient) as busy:
            await forgotten.send(json.dumps({"type": "text", "context_id": "c", "text": "Nothing more comes"}))
            talker = Recorder(busy)
            await talker.until("ready")
            await talker.send(type="speak", context_id="c1", text=workload("long"))
            outcomes = await asyncio.gather(closed(silent), closed(forgotten))
            closed_after = time.monotonic() - started
            await asyncio.sleep(1)
            await talker.send(type="cancel", context_id="c1")  # still open, still speaking
            await talker.until("cancelled", "c1")
            return outcomes, closed_after

    outcomes, closed_after = asyncio.run(run())
    for messages, code in outcomes:
        assert [m["type"] for m in messages if m["type"] != "audio_start"] == ["ready", "error"]
        assert messages[-1]["code"] == c.IDLE_TIMEOUT and code == 1000
    assert closed_after >= IDLE_S


def test_a_client_that_stops_reading_pauses_its_synthesis(limited, triton):
    """With the socket's buffers full, the context stops taking text, so Triton's vocoder
    goes idle well before the text is spoken; reading again finishes it whole."""
    text = workload("long")  # about 108 s of speech

    async def run():
        sock = socket.create_connection(("127.0.0.1", limited.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        gateway = psutil.Process(limited.pid)
        async with connect(limited, sock=sock) as ws:
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
