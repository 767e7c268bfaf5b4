"""`speechstream-gateway`: protocol v1 over WebSocket, audio from Triton's `tts` model.

Each connection is a Session; each context on it has a worker task that owns one gRPC
stream to `tts`, turns its PCM into frames and sends them in order.
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
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from python_backends.voice import DEFAULT_VOICE, sample_rate

from . import protocol as p
from . import settings as s
from .audio import FrameEncoder
from .backends import Backends
from .inbox import Inbox, Mark
from .metrics import Metrics
from .segmenter import Segmenter
from .settings import Settings
from .tts_client import BackendUnavailable, SynthesisError, TtsStream

log = logging.getLogger("speechstream.gateway")

STATIC = Path(__file__).parent / "static"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
VOICE_RATE = sample_rate(DEFAULT_VOICE)
VOICES = (DEFAULT_VOICE,)
# Characters of whole sentences per `tts` request (about 30 s of speech): a request is
# synthesized to its end whatever the client does, so this bounds the work a paused
# (slow-reading) context has in flight.
REQUEST_CHARS = 400


@dataclass
class Context:
    """One context: text waiting for synthesis, and the worker that speaks it."""

    id: str
    stream: int
    segmenter: Segmenter = field(default_factory=Segmenter)
    inbox: Inbox = field(default_factory=Inbox)
    closed: bool = False
    speaking: bool = False  # the worker holds text it has not yet delivered as audio
    task: asyncio.Task | None = None

    ready_at: float | None = None  # when text arrived for this context while it was idle

    @property
    def busy(self) -> bool:
        return self.speaking or len(self.inbox) > 0

    def submit(self, *items: str | Mark) -> None:
        """Queue sentences and marks for the worker; note when an idle context gets text."""
        if not self.busy and any(isinstance(item, str) for item in items):
            self.ready_at = time.monotonic()
        self.inbox.put(*items)


class Gateway:
    """What the connections share: settings, the Triton client, the live sessions, metrics."""

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

    async def handler(self, ws: ServerConnection) -> None:
        session = Session(ws, self)
        self.sessions.add(session)
        try:
            await session.run()
        finally:
            self.sessions.discard(session)


class Session:
    """One WebSocket connection speaking protocol v1."""

    def __init__(self, ws: ServerConnection, gateway: Gateway) -> None:
        self.ws = ws
        self.backends = gateway.backends
        self.settings = gateway.settings
        self.metrics = gateway.metrics
        self.id = uuid.uuid4().hex[:12]
        self.config = p.Config(VOICES[0])
        self.contexts: dict[str, Context] = {}
        self.streams = 0

    async def run(self) -> None:
        try:
            await self.send_ready()
            while (frame := await self.receive()) is not None:
                try:
                    await self.handle(self.parse(frame))
                except p.ProtocolError as e:
                    await self.send_error(e.code, e.message, e.context_id)
                except ConnectionClosed:
                    raise
                except Exception:
                    log.exception("session %s: unexpected error handling a message", self.id)
                    await self.send_error(p.INTERNAL_ERROR, "the server failed to handle this message")
        except ConnectionClosed:
            pass
        finally:
            for context in self.contexts.values():
                context.task.cancel()

    async def receive(self) -> str | bytes | None:
        """The next client frame; None once the connection is closed or left idle."""
        idle_s = self.settings.idle_timeout_s or None  # 0: never
        while True:
            try:
                return await asyncio.wait_for(self.ws.recv(), idle_s)  # recv is cancel-safe
            except asyncio.TimeoutError:  # not the builtin on Python 3.10
                if any(context.busy for context in self.contexts.values()):
                    continue  # speaking is not idle; a context left open with nothing to say is
                log.info("session %s: idle for %g s, closing", self.id, idle_s)
                await self.send_error(p.IDLE_TIMEOUT, f"no message for {idle_s:g} s")
                await self.ws.close(1000, "idle timeout")
                return None

    def parse(self, frame: str | bytes) -> p.Config | p.ContextMessage:
        size = len(frame) if isinstance(frame, bytes) else len(frame.encode("utf-8", "surrogatepass"))
        if size > self.settings.max_message_bytes:
            raise p.ProtocolError(
                p.MESSAGE_TOO_LARGE, f"message of {size} bytes; the limit is {self.settings.max_message_bytes}"
            )
        return p.parse_message(frame, VOICES, self.settings.max_text_chars)

    async def send_error(self, code: str, message: str, context_id: str | None = None) -> None:
        self.metrics.errors.labels(code).inc()
        await self.ws.send(p.error(code, message, context_id))

    async def send_ready(self) -> None:
        c = self.config
        await self.ws.send(p.encode(
            "ready", session_id=self.id, format=c.format, sample_rate=c.sample_rate,
            channels=1, frame_ms=c.frame_ms, voices=list(VOICES),
        ))

    async def handle(self, message: p.Config | p.ContextMessage) -> None:
        if isinstance(message, p.Config):
            if self.streams:
                raise p.ProtocolError(p.CONFIG_TOO_LATE, "config must come before the first speak or text")
            self.config = message
            await self.send_ready()
            return
        context = self.contexts.get(message.context_id)
        if message.type in p.TEXT_TYPES:
            if context is None:
                context = await self.open(message.context_id)
            elif message.type == "speak":
                raise p.ProtocolError(p.CONTEXT_EXISTS, f"context '{message.context_id}' is already open", message.context_id)
            elif context.closed:
                raise p.ProtocolError(p.CONTEXT_CLOSED, f"context '{message.context_id}' is closed", message.context_id)
            self.append(context, message.text)
            if message.type == "speak":
                self.close(context)
            return
        if context is None:
            raise p.ProtocolError(p.UNKNOWN_CONTEXT, f"no open context '{message.context_id}'", message.context_id)
        if message.type == "cancel":
            context.task.cancel()
            del self.contexts[context.id]
            await self.ws.send(p.encode("cancelled", context_id=context.id))
        elif context.closed:
            raise p.ProtocolError(p.CONTEXT_CLOSED, f"context '{message.context_id}' is closed", message.context_id)
        elif message.type == "flush":
            context.submit(*context.segmenter.flush(), Mark.FLUSH)
        else:
            self.close(context)

    def append(self, context: Context, text: str) -> None:
        waiting = context.inbox.chars + len(context.segmenter.pending)
        if waiting + len(text) > self.settings.max_text_chars:
            raise p.ProtocolError(
                p.TEXT_TOO_LONG,
                f"{waiting} characters are already waiting for synthesis; the limit is {self.settings.max_text_chars}",
                context.id,
            )
        context.submit(*context.segmenter.append(text))

    async def open(self, context_id: str) -> Context:
        if len(self.contexts) >= self.settings.max_contexts:
            raise p.ProtocolError(p.TOO_MANY_CONTEXTS, f"at most {self.settings.max_contexts} open contexts", context_id)
        self.streams = self.streams % 0xFFFF + 1
        context = Context(context_id, self.streams)
        context.task = asyncio.create_task(self.speak(context))  # it sends after audio_start, queued first below
        self.contexts[context_id] = context
        await self.ws.send(p.encode("audio_start", context_id=context_id, stream=context.stream))
        return context

    def close(self, context: Context) -> None:
        context.submit(*context.segmenter.flush(), Mark.CLOSE)
        context.closed = True

    async def speak(self, context: Context) -> None:
        """The context's worker: synthesize its sentences in order, send frames.

        `ws.send` waits while the connection's write buffer is full, and the worker
        takes no more sentences meanwhile: that is the backpressure on a slow reader.
        """
        c = self.config
        encoder = FrameEncoder(VOICE_RATE, c.sample_rate, c.frame_ms, c.format)
        backend = self.backends.acquire()
        tts = TtsStream(backend.client, self.metrics.triton_first_response.observe)
        seq = 0

        async def send(payloads: list[bytes], last: bool = False) -> None:
            nonlocal seq
            first = encoder.samples - len(payloads) * encoder.frame_samples
            for i, payload in enumerate(payloads):
                end = last and i == len(payloads) - 1
                await self.ws.send(p.audio_frame(context.stream, seq, first + i * encoder.frame_samples, payload, end))
                seq += 1
            if payloads and context.ready_at is not None:
                self.metrics.ttfp.observe(time.monotonic() - context.ready_at)
                context.ready_at = None
            self.metrics.audio.inc(len(payloads) * c.frame_ms / 1000)

        try:
            while True:
                context.speaking = False
                item = await context.inbox.take(REQUEST_CHARS)
                context.speaking = True
                if isinstance(item, Mark):
                    # Deliver every sample so far: the partial frame goes out padded.
                    await send(encoder.finish(), last=item is Mark.CLOSE)
                    if item is Mark.FLUSH:
                        await self.ws.send(p.encode("flushed", context_id=context.id))
                        continue
                    ms = round((encoder.samples - encoder.padding) * 1000 / c.sample_rate)  # without the padding
                    await self.ws.send(p.encode("done", context_id=context.id, audio_ms=ms))
                    break
                start_ms = encoder.position * 1000 / c.sample_rate
                async for chunk in tts.synthesize(" ".join(item), c.voice_params):
                    if c.timestamps and chunk.words:
                        await self.ws.send(timestamps(context.id, chunk.words, start_ms))
                    await send(encoder.push(chunk.pcm))
        except BackendUnavailable as e:
            log.error("context %s: Triton %s: %s", context.id, backend.url, e)
            backend.mark(False, str(e).splitlines()[0])
            await self._fail(context, p.BACKEND_UNAVAILABLE, str(e))
        except SynthesisError as e:
            log.warning("context %s: synthesis failed: %s", context.id, e)
            await self._fail(context, p.SYNTHESIS_FAILED, str(e))
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("context %s: unexpected failure", context.id)
            await self._fail(context, p.INTERNAL_ERROR, "the server failed while speaking this context")
        finally:
            tts.close()
            self.backends.release(backend)
            if self.contexts.get(context.id) is context and context.closed:
                del self.contexts[context.id]

    async def _fail(self, context: Context, code: str, message: str) -> None:
        self.contexts.pop(context.id, None)
        with contextlib.suppress(ConnectionClosed):
            await self.send_error(code, message, context.id)


def timestamps(context_id: str, words: list[tuple[str, int, int]], start_ms: float) -> str:
    """A `timestamps` message; word samples (voice rate) count from `start_ms`."""

    def ms(sample: int) -> int:
        return round(start_ms + sample * 1000 / VOICE_RATE)

    return p.encode(
        "timestamps", context_id=context_id, words=[w for w, _, _ in words],
        start_ms=[ms(a) for _, a, _ in words], end_ms=[ms(b) for _, _, b in words],
    )


def http_handler(gateway: Gateway):
    settings = gateway.settings

    async def process_request(connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if path == p.PATH:
            return admit(connection, request, settings)
        if path == "/healthz":
            return health(gateway.backends)
        if path == "/metrics":
            body, content_type = gateway.metrics.exposition()
            return Response(HTTPStatus.OK.value, "OK", Headers({"Content-Type": content_type}), body)
        if path == "/v1/voices":
            return unauthorized(connection, request, settings) or json_response(HTTPStatus.OK, {"voices": voices()})
        return static_file(connection, "index.html" if path == "/" else path.removeprefix("/static/"))

    return process_request


def voices() -> list[dict]:
    return [{"id": name, "sample_rate": sample_rate(name)} for name in VOICES]


def json_response(status: HTTPStatus, body: dict) -> Response:
    return Response(status.value, status.phrase, Headers({"Content-Type": "application/json"}), json.dumps(body).encode())


def unauthorized(connection: ServerConnection, request: Request, settings: Settings) -> Response | None:
    """The 401 for a request without the configured API key; None when it may go on."""
    if not settings.api_key or hmac.compare_digest(presented_key(request).encode(), settings.api_key.encode()):
        return None
    refusal = connection.respond(HTTPStatus.UNAUTHORIZED, "a valid API key is required\n")
    refusal.headers["WWW-Authenticate"] = "Bearer"
    return refusal


def admit(connection: ServerConnection, request: Request, settings: Settings) -> Response | None:
    """None lets the WebSocket handshake go on; otherwise the refusal."""
    if refusal := unauthorized(connection, request, settings):
        return refusal
    client = connection.remote_address[0]
    open_here = sum(1 for other in connection.server.connections if other.remote_address[0] == client)
    if settings.max_connections_per_client and open_here >= settings.max_connections_per_client:
        log.warning("refused a connection from %s: %d already open", client, open_here)
        return connection.respond(
            HTTPStatus.TOO_MANY_REQUESTS, f"at most {settings.max_connections_per_client} connections per client\n"
        )
    # The kernel's send buffer holds no more than the write buffer: past both, `send`
    # waits and synthesis for the slow reader pauses.
    sock = connection.transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, settings.max_buffered_bytes)
    return None


def presented_key(request: Request) -> str:
    """The API key in the `Authorization: Bearer`, `X-API-Key` header or `api_key` query;
    empty (refused) when absent or given more than once."""
    auth = request.headers.get_all("Authorization")
    if auth:
        return auth[0][7:].strip() if len(auth) == 1 and auth[0].lower().startswith("bearer ") else ""
    key = request.headers.get_all("X-API-Key") or parse_qs(urlsplit(request.path).query).get("api_key", [])
    return key[0] if len(key) == 1 else ""


def health(backends: Backends) -> Response:
    """200 while at least one Triton is ready, as the health poll and the streams last saw."""
    ready = any(b.up for b in backends.all)
    status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
    return json_response(status, {
        "gateway": "ok",
        "triton": "ready" if ready else "unavailable",
        "backends": {b.url: "ready" if b.up else "unavailable" for b in backends.all},
    })


def static_file(connection: ServerConnection, name: str) -> Response:
    """A file of gateway/static, by plain name only: no directories, so no traversal."""
    path = STATIC / name
    if "/" in name or "\\" in name or name.startswith(".") or path.suffix not in CONTENT_TYPES or not path.is_file():
        return connection.respond(HTTPStatus.NOT_FOUND, "not found\n")
    headers = Headers({"Content-Type": CONTENT_TYPES[path.suffix], "Cache-Control": "no-cache"})
    return Response(HTTPStatus.OK.value, "OK", headers, path.read_bytes())


async def serve_forever(settings: Settings) -> None:
    gateway = Gateway(settings)
    watch = asyncio.create_task(gateway.backends.watch())
    async with serve(
        gateway.handler, settings.host, settings.port,
        process_request=http_handler(gateway),
        origins=[*settings.allowed_origins, None] if settings.allowed_origins else None,  # None: no Origin header
        max_size=settings.max_frame_bytes,
        max_queue=4,  # frames received ahead of the session: with max_size, bounds memory per connection
        write_limit=settings.max_buffered_bytes,
    ) as server:
        log.info("gateway on ws://%s:%d%s, Triton at %s", settings.host, settings.port, p.PATH,
                 ", ".join(settings.triton_urls))
        try:
            await server.serve_forever()
        finally:
            watch.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="speechstream-gateway", description=__doc__.splitlines()[0])
    s.add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(serve_forever(s.from_arguments(args)))


if __name__ == "__main__":
    main()
