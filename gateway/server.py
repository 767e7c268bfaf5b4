"""`speechstream-gateway`: protocol v1 over WebSocket and OpenAI's speech API over HTTP,
on one port, with audio from Triton's `tts` model.

This is the I/O shell (aiohttp): routes, admission (API key, Origin, per-client cap)
and the HTTP speech endpoint. A WebSocket connection is a `session.Session`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import logging
import socket
import time
from http import HTTPStatus
from pathlib import Path

from aiohttp import web

from python_backends.contract import MAX_SENTENCE_CHARS
from python_backends.text import split_sentences
from python_backends.voice import sample_rate
from python_backends import contract as c

from . import protocol as p

from . import settings as s
from .backends import Backend, Backends
from .inbox import Inbox, Mark
from .metrics import Metrics
from .session import REQUEST_CHARS, VOICE_RATE, VOICES, ClientSocket, Session
from .settings import Settings
from .speech_api import ApiError, SpeechBody, SpeechRequest, parse_speech_request
from .tts_client import BackendUnavailable, SynthesisError, TtsStream

log = logging.getLogger("speechstream.gateway")

STATIC = Path(__file__).parent / "static"
SPEECH_PATH = "/v1/audio/speech"
GATEWAY = web.AppKey("gateway", "Gateway")


class Gateway:
    """What the connections share: settings, the Triton servers, the live sessions, metrics."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.backends = Backends(settings.triton_urls)
        self.sessions: set[Session] = set()
        self.metrics = Metrics(
            connections=lambda: len(self.sessions),
            contexts=lambda: sum(len(s.contexts) for s in self.sessions),
            speaking=lambda: sum(c.busy for s in self.sessions for c in s.contexts.values()),
            backends=self.backends.all,
        )


async def stream(request: web.Request) -> web.StreamResponse:
    """GET /v1/stream: admit the client, then speak protocol v1 until it leaves."""
    gateway = request.app[GATEWAY]
    settings = gateway.settings
    if refusal := unauthorized(request, settings) or refused_origin(request, settings):
        return refusal
    client = request.remote or ""
    open_here = sum(1 for session in gateway.sessions if session.client == client)
    if settings.max_connections_per_client and open_here >= settings.max_connections_per_client:
        log.warning("refused a connection from %s: %d already open", client, open_here)
        return text_response(
            HTTPStatus.TOO_MANY_REQUESTS, f"at most {settings.max_connections_per_client} connections per client\n"
        )
    ws = web.WebSocketResponse(
        max_msg_size=settings.max_frame_bytes,  # past it: close 1009
        writer_limit=settings.max_buffered_bytes,
        compress=False,  # Opus does not deflate; compressing it would only cost CPU
    )
    if not ws.can_prepare(request).ok:
        return text_response(HTTPStatus.UPGRADE_REQUIRED, "this path takes a WebSocket upgrade\n")
    limit_buffers(request, settings.max_buffered_bytes)
    await ws.prepare(request)
    session = Session(ClientSocket(ws), gateway, client)
    gateway.sessions.add(session)
    try:
        await session.run()
    finally:
        gateway.sessions.discard(session)
    return ws


def limit_buffers(request: web.Request, size: int) -> None:
    """The transport and the kernel each hold no more than `size` unsent bytes: past
    both, `send` waits and the slow reader's synthesis pauses."""
    request.transport.set_write_buffer_limits(high=size)
    sock = request.transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


async def speech(request: web.Request) -> web.StreamResponse:
    """POST /v1/audio/speech (OpenAI's API): the body streams as the audio is made."""
    gateway = request.app[GATEWAY]
    if refusal := unauthorized(request, gateway.settings):
        return refusal
    try:
        speech_request = parse_speech_request(await request.read(), VOICES, gateway.settings.max_text_chars)
    except ApiError as e:
        return api_error(gateway, c.INVALID_MESSAGE, e)
    except web.HTTPRequestEntityTooLarge:
        return api_error(gateway, c.MESSAGE_TOO_LARGE, ApiError(
            f"the body is over {gateway.settings.max_message_bytes} bytes", status=HTTPStatus.REQUEST_ENTITY_TOO_LARGE
        ))
    backend = gateway.backends.acquire()
    tts = TtsStream(backend.client, gateway.metrics.triton_first_response.observe)
    try:
        return await stream_speech(request, gateway, backend, tts, speech_request)
    finally:
        tts.close()
        gateway.backends.release(backend)


async def stream_speech(
    request: web.Request, gateway: Gateway, backend: Backend, tts: TtsStream, speech_request: SpeechRequest
) -> web.StreamResponse:
    """The status waits for the first audio, so a failure before it is an error response;
    one after it cuts the body short (a truncated chunked body, which clients report)."""
    started = time.monotonic()
    body = SpeechBody(speech_request, VOICE_RATE)
    async with contextlib.aclosing(synthesize(tts, speech_request)) as chunks:
        try:
            first = await anext(chunks)
        except (BackendUnavailable, SynthesisError) as e:
            return api_error(gateway, *synthesis_failure(backend, e))
        response = web.StreamResponse(headers={"Content-Type": speech_request.content_type})
        await response.prepare(request)
        await response.write(body.push(first.pcm))
        gateway.metrics.ttfp.observe(time.monotonic() - started)
        try:
            async for chunk in chunks:
                await response.write(body.push(chunk.pcm))
            await response.write(body.finish())
        except (BackendUnavailable, SynthesisError) as e:
            code, _ = synthesis_failure(backend, e)
            gateway.metrics.errors.labels(code).inc()
            log.warning("%s: cutting a streamed body short after %.2f s of audio", SPEECH_PATH, body.audio_s)
            request.transport.close()
            return response
        finally:
            gateway.metrics.audio.inc(body.audio_s)
    await response.write_eof()
    return response


async def synthesize(tts: TtsStream, speech_request: SpeechRequest):
    """The text's audio, in `tts` requests of whole sentences up to REQUEST_CHARS: each
    request is synthesized to its end, so this bounds the work for a client that stops
    reading."""
    inbox = Inbox()
    inbox.put(*(s.text for s in split_sentences(speech_request.text, MAX_SENTENCE_CHARS)), Mark.CLOSE)
    while not isinstance(batch := await inbox.take(REQUEST_CHARS), Mark):
        async for chunk in tts.synthesize(" ".join(batch), speech_request.voice_params):
            yield chunk


def synthesis_failure(backend: Backend, e: Exception) -> tuple[str, ApiError]:
    if isinstance(e, BackendUnavailable):
        log.error("%s: Triton %s: %s", SPEECH_PATH, backend.url, e)
        backend.mark(False, str(e).splitlines()[0])
        return c.BACKEND_UNAVAILABLE, ApiError(str(e), status=HTTPStatus.SERVICE_UNAVAILABLE)
    log.warning("%s: synthesis failed: %s", SPEECH_PATH, e)
    return c.SYNTHESIS_FAILED, ApiError(str(e), status=HTTPStatus.INTERNAL_SERVER_ERROR)


def api_error(gateway: Gateway, code: str, error: ApiError) -> web.Response:
    gateway.metrics.errors.labels(code).inc()
    return json_response(error.status, error.body())


async def healthz(request: web.Request) -> web.Response:
    """200 while at least one Triton is ready, as the health poll and the streams last saw."""
    backends = request.app[GATEWAY].backends.all
    ready = any(b.up for b in backends)
    return json_response(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, {
        "gateway": "ok",
        "triton": "ready" if ready else "unavailable",
        "backends": {b.url: "ready" if b.up else "unavailable" for b in backends},
    })


async def metrics(request: web.Request) -> web.Response:
    body, content_type = request.app[GATEWAY].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": content_type})


async def voices(request: web.Request) -> web.Response:
    if refusal := unauthorized(request, request.app[GATEWAY].settings):
        return refusal
    return json_response(HTTPStatus.OK, {"voices": [{"id": name, "sample_rate": sample_rate(name)} for name in VOICES]})


async def page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


def json_response(status: HTTPStatus, body: dict) -> web.Response:
    return web.Response(status=status.value, body=json.dumps(body).encode(), content_type="application/json")


def text_response(status: HTTPStatus, text: str) -> web.Response:
    return web.Response(status=status.value, text=text)


def unauthorized(request: web.Request, settings: Settings) -> web.Response | None:
    """The 401 for a request without the configured API key; None when it may go on."""
    if not settings.api_key or hmac.compare_digest(presented_key(request).encode(), settings.api_key.encode()):
        return None
    refusal = text_response(HTTPStatus.UNAUTHORIZED, "a valid API key is required\n")
    refusal.headers["WWW-Authenticate"] = "Bearer"
    return refusal


def refused_origin(request: web.Request, settings: Settings) -> web.Response | None:
    """The 403 for a browser page from an Origin not allowed; requests without one pass."""
    origin = request.headers.getall("Origin", [])
    if not settings.allowed_origins or not origin or (len(origin) == 1 and origin[0] in settings.allowed_origins):
        return None
    log.warning("refused a connection from Origin %s", origin)
    return text_response(HTTPStatus.FORBIDDEN, "this Origin is not allowed\n")


def presented_key(request: web.Request) -> str:
    """The API key in the `Authorization: Bearer`, `X-API-Key` header or `api_key` query;
    empty (refused) when absent or given more than once."""
    auth = request.headers.getall("Authorization", [])
    if auth:
        return auth[0][7:].strip() if len(auth) == 1 and auth[0].lower().startswith("bearer ") else ""
    key = request.headers.getall("X-API-Key", []) or request.query.getall("api_key", [])
    return key[0] if len(key) == 1 else ""


def application(gateway: Gateway) -> web.Application:
    # A speech request body is one message: the same limit as on the WebSocket.
    app = web.Application(client_max_size=gateway.settings.max_message_bytes)
    app[GATEWAY] = gateway
    app.router.add_get(c.PROTOCOL_PATH, stream)
    app.router.add_post(SPEECH_PATH, speech)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/voices", voices)
    app.router.add_get("/", page)
    app.router.add_static("/static/", STATIC)
    return app


async def serve_forever(settings: Settings) -> None:
    gateway = Gateway(settings)
    watch = asyncio.create_task(gateway.backends.watch())
    runner = web.AppRunner(application(gateway), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, settings.host, settings.port).start()
        log.info("gateway on http://%s:%d (WebSocket %s), Triton at %s", settings.host, settings.port, c.PROTOCOL_PATH,
                 ", ".join(settings.triton_urls))
        await asyncio.Event().wait()
    finally:
        watch.cancel()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="speechstream-gateway", description=__doc__.splitlines()[0])
    s.add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(serve_forever(s.from_arguments(args)))


if __name__ == "__main__":
    main()
