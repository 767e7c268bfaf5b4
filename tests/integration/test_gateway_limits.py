"""The gateway's limits and access control, each set low on a gateway of its own. These
are the gateway's own rules, so its Triton is an address where nothing listens: no
synthesis is needed (the rules that need it, idle-while-speaking and backpressure, are
in test_gateway.py)."""

import asyncio
import base64
import json
import os
import socket
import time
import urllib.error
import urllib.request

import pytest
import websockets

from contract import models as c
from operations.loopback import free_ports
from speechstream import protocol as v1
from tests.recorder import Recorder
from tests.servers import Gateway, Gateways

KEY = "s3cret-key"
ORIGIN = "http://app.example"
PER_CLIENT = 3
MESSAGE_BYTES = 4096
IDLE_S = 1.5
HEAD_S = 1.0


def gateway_with(gateways: Gateways, *flags: str, name: str = "gateway") -> Gateway:
    """A gateway with `flags` whose Triton is an address where nothing listens."""
    nowhere = f"127.0.0.1:{free_ports(1)[0]}"
    return gateways.start(nowhere, *flags, name=name, triton_ready=False)


@pytest.fixture(scope="module")
def limited(module_gateways):
    return gateway_with(
        module_gateways,
        "--api-key", KEY, "--allowed-origins", ORIGIN, "--max-connections-per-client", str(PER_CLIENT),
        "--max-message-bytes", str(MESSAGE_BYTES), name="limited",
    )


@pytest.fixture(scope="module")
def impatient(module_gateways):
    return gateway_with(
        module_gateways, "--api-key", KEY, "--idle-timeout", str(IDLE_S), "--header-timeout", str(HEAD_S),
        "--body-timeout", str(HEAD_S), name="impatient",
    )


def url(gateway, query=""):
    return f"ws://127.0.0.1:{gateway.port}{v1.PROTOCOL_PATH}{query}"


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


def test_health_readiness_and_page_need_no_key(limited):
    for path in ("/", "/healthz"):  # alive, with no Triton behind it
        with urllib.request.urlopen(f"http://127.0.0.1:{limited.port}{path}", timeout=5) as r:
            assert r.status == 200
    with pytest.raises(urllib.error.HTTPError) as readiness:
        urllib.request.urlopen(f"http://127.0.0.1:{limited.port}/readyz", timeout=5)
    body = json.loads(readiness.value.read())
    assert readiness.value.code == 503 and not body["ready"]
    assert all(state.startswith("down: ") for state in body["backends"].values())


def test_websocket_connections_per_client_address_are_capped(limited):
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
            await client.send(type="config", format="pcm_s16le")  # the connection goes on
            assert (await client.until("ready"))["format"] == "pcm_s16le"
            await ws.send("x" * (16 * MESSAGE_BYTES + 1))
            with pytest.raises(websockets.ConnectionClosedError):
                await client.until("never", timeout=10)
            return error["code"], ws.protocol.close_rcvd.code

    assert asyncio.run(run()) == (v1.MESSAGE_TOO_LARGE, 1009)


def test_idle_connections_are_closed(impatient):
    """Silent, and silent with a context left open with nothing to say: both are closed
    after the idle timeout with `idle_timeout`, and no sooner."""

    async def closed(ws):
        messages = [json.loads(m) async for m in ws]  # until the server closes it
        return messages, ws.protocol.close_rcvd.code

    async def run():
        started = time.monotonic()
        async with connect(impatient) as silent, connect(impatient) as forgotten:
            await forgotten.send(json.dumps({"type": "text", "context_id": "c", "text": "Nothing more comes"}))
            outcomes = await asyncio.gather(closed(silent), closed(forgotten))
            return outcomes, time.monotonic() - started

    outcomes, closed_after = asyncio.run(run())
    for messages, code in outcomes:
        assert [m["type"] for m in messages if m["type"] != "audio_start"] == ["ready", "error"]
        assert messages[-1]["code"] == v1.IDLE_TIMEOUT and code == 1000
    assert closed_after >= IDLE_S


def post(gateway, body: bytes, headers: dict[str, str], path: str = "/v1/audio/speech") -> tuple[int, dict, dict]:
    """(status, JSON body, headers) of a POST to the gateway."""
    request = urllib.request.Request(f"http://127.0.0.1:{gateway.port}{path}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read() or b"{}"), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


SPEECH = json.dumps({"model": "tts-1", "voice": "alloy", "input": "Hello there."}).encode()
JSON = {"Content-Type": "application/json", "X-API-Key": KEY}


@pytest.mark.parametrize("body,headers,status,param,code", [
    (SPEECH, {"Content-Type": "application/json"}, 401, None, "invalid_api_key"),
    (SPEECH, {**JSON, "X-API-Key": "wrong"}, 401, None, "invalid_api_key"),
    (SPEECH, {**JSON, "Origin": "http://evil.example"}, 403, None, None),
    (SPEECH, {**JSON, "Content-Type": "text/plain"}, 415, None, None),  # a browser's simple, unchecked POST
    (SPEECH, {"X-API-Key": KEY}, 415, None, None),
    (b"this is not gzip", {**JSON, "Content-Encoding": "gzip"}, 400, None, None),
    (b'{"model": "m", "voice": "alloy", "input": "Hi \\ud800."}', JSON, 400, "input", None),
    (b"[" * 5000, JSON, 413, None, None),
])
def test_refused_speech_requests_get_openais_json_error(limited, body, headers, status, param, code):
    got, error, response_headers = post(limited, body, headers)
    assert got == status
    assert error["error"]["type"] == "invalid_request_error" and error["error"]["message"]
    assert (error["error"]["param"], error["error"]["code"]) == (param, code)
    if status == 401:
        assert response_headers["WWW-Authenticate"] == "Bearer"


def test_an_admitted_speech_request_without_triton_is_a_503(limited):
    status, error, _ = post(limited, SPEECH, {**JSON, "Origin": ORIGIN})
    assert status == 503 and "Triton unavailable" in error["error"]["message"]


def test_metrics_need_the_key(limited):
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{limited.port}/metrics", timeout=5)
    assert refused.value.code == 401
    url = f"http://127.0.0.1:{limited.port}/metrics"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=5) as r:
        assert b"speechstream_errors_total" in r.read()


def test_wrong_keys_are_throttled_per_address(gateways):
    """Past --max-key-failures wrong keys, the address gets 429 with Retry-After, even
    with the right key, until the minute is over."""
    gateway = gateway_with(gateways, "--api-key", KEY, "--max-key-failures", "3")
    statuses = [refusal(gateway, headers={"X-API-Key": "guess"}) for _ in range(3)]
    assert statuses == [401] * 3
    assert refusal(gateway, headers={"X-API-Key": KEY}) == 429
    status, error, headers = post(gateway, SPEECH, {**JSON, "X-API-Key": "guess"})
    assert status == 429 and 0 < int(headers["Retry-After"]) <= 60


def test_streams_are_capped_per_address_across_connections_and_http(gateways):
    """Contexts on all of an address's connections and its HTTP speech requests count
    together; past the cap, a context gets `too_many_streams` and a POST 429."""

    async def run(gateway):
        async with connect(gateway, headers={}) as a, connect(gateway, headers={}) as b:
            first, second = Recorder(a), Recorder(b)
            await first.until("ready")
            await second.until("ready")
            await first.send(type="text", context_id="c1", text="An unfinished")  # open, nothing to synthesize
            await second.send(type="text", context_id="c2", text="An unfinished")
            await second.send(type="text", context_id="c3", text="One too many")
            refused = await second.until("error", "c3")
            status, _, headers = await asyncio.to_thread(post, gateway, SPEECH, {"Content-Type": "application/json"})
            await first.send(type="cancel", context_id="c1")
            await first.until("cancelled", "c1")
            after, _, _ = await asyncio.to_thread(post, gateway, SPEECH, {"Content-Type": "application/json"})
            return refused, status, headers, after

    refused, status, headers, after = asyncio.run(run(gateway_with(gateways, "--max-streams-per-client", "2")))
    assert refused["code"] == v1.TOO_MANY_STREAMS and refused["retry_after_ms"] > 0
    assert status == 429 and int(headers["Retry-After"]) >= 1
    assert after == 503  # admitted: no Triton behind this gateway


def raw(gateway, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=10, source_address=(source, 0))


def read_all(sock: socket.socket) -> bytes:
    """Everything the gateway sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def healthz(sock: socket.socket) -> bytes:
    """The status line of GET /healthz on an open connection."""
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
    return sock.recv(65536).split(b"\r\n")[0]


def test_connections_of_any_kind_are_capped_per_address(limited):
    """Idle keep-alive HTTP connections count too; another address is not refused."""
    held = [raw(limited) for _ in range(PER_CLIENT)]
    assert all(healthz(s) == b"HTTP/1.1 200 OK" for s in held)
    with raw(limited) as refused:
        response = read_all(refused)
    assert response.startswith(b"HTTP/1.1 429 ") and b"Retry-After: 1" in response
    with raw(limited, source="127.0.0.2") as other:
        assert healthz(other) == b"HTTP/1.1 200 OK"
    for s in held:
        s.close()


@pytest.fixture(scope="module")
def crowded(module_gateways):
    return gateway_with(module_gateways, "--max-connections", "4", "--max-connections-per-client", "0", name="crowded")


def test_connections_are_capped_in_all(crowded):
    held = [raw(crowded, source=f"127.0.0.{i + 1}") for i in range(4)]
    assert all(healthz(s) == b"HTTP/1.1 200 OK" for s in held)
    with raw(crowded, source="127.0.0.9") as refused:
        assert read_all(refused).startswith(b"HTTP/1.1 503 ")
    held.pop().close()
    deadline = time.monotonic() + 10
    while True:  # the gateway counts the closed connection out as soon as it sees it
        with raw(crowded, source="127.0.0.9") as again:
            status = healthz(again)
        if status == b"HTTP/1.1 200 OK" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status == b"HTTP/1.1 200 OK"
    for s in held:
        s.close()


def test_a_slow_request_head_is_cut_off(impatient):
    with raw(impatient) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gat")
        started = time.monotonic()
        assert read_all(sock) == b""
        assert HEAD_S * 0.9 <= time.monotonic() - started < HEAD_S + 8


def test_a_slow_body_gets_408(impatient):
    with raw(impatient) as sock:
        sock.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
                     f"X-API-Key: {KEY}\r\nContent-Length: 100\r\n\r\n{{\"model\"".encode())
        response = sock.recv(65536)
    head, body = response.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 408 ") and b"did not arrive" in body


def handshake(gateway) -> socket.socket:
    """A WebSocket on a plain socket, past the handshake and the `ready` frame: frames
    sent on it are exactly as written (a client library masks every frame)."""
    sock = raw(gateway)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {v1.PROTOCOL_PATH} HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                  f"X-API-Key: {KEY}\r\n\r\n").encode())
    data = b""
    while b'"ready"' not in data:
        data += sock.recv(65536)
    assert data.startswith(b"HTTP/1.1 101 ")
    return sock


CONFIG = json.dumps({"type": "config", "format": "pcm_s16le"}).encode()


def close_code(data: bytes) -> int:
    """The code of the close frame that ends what the server sent."""
    close = data[data.rindex(b"\x88"):]
    return int.from_bytes(close[2:4], "big")


def test_an_unmasked_frame_closes_the_connection_with_1002(limited):
    from websockets.frames import Frame, Opcode

    with handshake(limited) as sock:
        sock.sendall(Frame(Opcode.TEXT, CONFIG).serialize(mask=True))  # masked: answered
        data = b""
        while b'"pcm_s16le"' not in data:
            data += sock.recv(65536)
        sock.sendall(Frame(Opcode.TEXT, CONFIG).serialize(mask=False))
        assert close_code(read_all(sock)) == 1002


def test_a_ping_flood_closes_the_connection_with_1008(limited):
    """A few pings are answered; hundreds in a row close the connection, and only it."""

    async def run():
        async with connect(limited) as bystander, connect(limited) as flooder:
            assert json.loads(await flooder.recv())["type"] == "ready"
            await asyncio.wait_for(asyncio.gather(*[await flooder.ping() for _ in range(5)]), 10)
            with pytest.raises(websockets.ConnectionClosedError):
                for _ in range(500):
                    await flooder.ping()
                await flooder.recv()
            await bystander.send(CONFIG.decode())
            ready = [json.loads(await bystander.recv()) for _ in range(2)][-1]
            return flooder.protocol.close_rcvd.code, ready["format"]

    assert asyncio.run(run()) == (1008, "pcm_s16le")


def request(gateway, path: str, method: str = "GET", headers: dict[str, str] | None = None):
    """(status, headers, body) of a request to the gateway."""
    req = urllib.request.Request(f"http://127.0.0.1:{gateway.port}{path}", method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


@pytest.mark.parametrize("path", ["/v1/audio/speech", "/v1/models", "/v1/audio/voices", "/v1/voices"])
def test_a_cors_preflight_is_answered_for_allowed_origins_only(limited, path):
    asking = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    status, headers, _ = request(limited, path, "OPTIONS", {"Origin": ORIGIN, **asking})
    assert status == 204 and headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "POST" in headers["Access-Control-Allow-Methods"]
    allowed = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type"} <= allowed
    status, headers, _ = request(limited, path, "OPTIONS", {"Origin": "http://evil.example", **asking})
    assert status == 403 and "Access-Control-Allow-Origin" not in headers


def test_responses_carry_cors_headers_and_the_request_id(limited):
    status, headers, _ = request(limited, "/v1/models", headers={"Origin": ORIGIN, "X-API-Key": KEY,
                                                                  "X-Request-ID": "trace-42"})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == ORIGIN
    assert headers["X-Request-ID"] == "trace-42" and "X-Request-ID" in headers["Access-Control-Expose-Headers"]
    status, _, headers = post(limited, SPEECH, {**JSON, "Origin": ORIGIN})  # an error response too
    assert status == 503 and headers["Access-Control-Allow-Origin"] == ORIGIN and headers["X-Request-ID"]
    ids = {request(limited, "/healthz")[1]["X-Request-ID"] for _ in range(3)}
    assert len(ids) == 3 and all(len(i) == 32 for i in ids)  # made up when not given, one per request


def test_models_and_audio_voices_as_openai_clients_list_them(limited):
    status, _, body = request(limited, "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    models = json.loads(body)
    assert status == 200 and models["object"] == "list" and "tts-1" in {m["id"] for m in models["data"]}
    assert all(m["object"] == "model" for m in models["data"])
    status, _, body = request(limited, "/v1/audio/voices", headers={"X-API-Key": KEY})
    voices = {v["id"]: v["voice"] for v in json.loads(body)["voices"]}
    assert status == 200 and voices["alloy"] == c.DEFAULT_VOICE and voices[c.DEFAULT_VOICE] == c.DEFAULT_VOICE
    status, _, body = request(limited, "/v1/models")
    error = json.loads(body)["error"]
    assert status == 401 and error["code"] == "invalid_api_key"  # OpenAI's error object, not plain text
