"""`speechstream-gateway`: protocol v1 over WebSocket, audio from Triton's `tts` model.

Each connection is a Session; each context on it has a worker task that owns one gRPC
stream to `tts`, turns its PCM into frames and sends them in order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path

import tritonclient.grpc.aio as grpcclient
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from python_backends.contract import MAX_TEXT_CHARS
from python_backends.voice import DEFAULT_VOICE, sample_rate

from . import protocol as p
from .audio import FrameEncoder
from .segmenter import Segmenter
from .tts_client import BackendUnavailable, SynthesisError, TtsStream

log = logging.getLogger("speechstream.gateway")

STATIC = Path(__file__).parent / "static"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
VOICE_RATE = sample_rate(DEFAULT_VOICE)
VOICES = (DEFAULT_VOICE,)
FLUSH, CLOSE = "flush", "close"


@dataclass
class Settings:
    triton_url: str = "127.0.0.1:8001"
    max_text_chars: int = MAX_TEXT_CHARS
    max_contexts: int = 16


@dataclass
class Context:
    """One context: text queued for synthesis, and the worker that speaks it."""

    id: str
    stream: int
    segmenter: Segmenter = field(default_factory=Segmenter)
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)  # sentence lists, FLUSH, CLOSE
    closed: bool = False
    task: asyncio.Task | None = None

    def submit(self, sentences: list[str]) -> None:
        if sentences:
            self.queue.put_nowait(sentences)


class Session:
    """One WebSocket connection speaking protocol v1."""

    def __init__(self, ws: ServerConnection, triton: grpcclient.InferenceServerClient, settings: Settings) -> None:
        self.ws = ws
        self.triton = triton
        self.settings = settings
        self.id = uuid.uuid4().hex[:12]
        self.config = p.Config(VOICES[0])
        self.contexts: dict[str, Context] = {}
        self.streams = 0

    async def run(self) -> None:
        await self.send_ready()
        try:
            async for frame in self.ws:
                try:
                    await self.handle(p.parse_message(frame, VOICES, self.settings.max_text_chars))
                except p.ProtocolError as e:
                    await self.ws.send(p.error(e.code, e.message, e.context_id))
        finally:
            for context in self.contexts.values():
                if context.task:
                    context.task.cancel()

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
            context.submit(context.segmenter.append(message.text))
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
            context.submit(context.segmenter.flush())
            context.queue.put_nowait(FLUSH)
        else:
            self.close(context)

    async def open(self, context_id: str) -> Context:
        if len(self.contexts) >= self.settings.max_contexts:
            raise p.ProtocolError(p.TOO_MANY_CONTEXTS, f"at most {self.settings.max_contexts} open contexts", context_id)
        self.streams = self.streams % 0xFFFF + 1
        context = Context(context_id, self.streams)
        self.contexts[context_id] = context
        await self.ws.send(p.encode("audio_start", context_id=context_id, stream=context.stream))
        context.task = asyncio.create_task(self.speak(context))
        return context

    def close(self, context: Context) -> None:
        context.submit(context.segmenter.flush())
        context.queue.put_nowait(CLOSE)
        context.closed = True

    async def speak(self, context: Context) -> None:
        """The context's worker: synthesize queued text in order, send frames."""
        c = self.config
        encoder = FrameEncoder(VOICE_RATE, c.sample_rate, c.frame_ms, c.format)
        tts = TtsStream(self.triton)
        seq = 0

        async def send(payloads: list[bytes], last: bool = False) -> None:
            nonlocal seq
            first = encoder.samples - len(payloads) * encoder.frame_samples
            for i, payload in enumerate(payloads):
                end = last and i == len(payloads) - 1
                await self.ws.send(p.audio_frame(context.stream, seq, first + i * encoder.frame_samples, payload, end))
                seq += 1

        try:
            pending = None
            while True:
                item = pending if pending is not None else await context.queue.get()
                pending = None
                if item in (FLUSH, CLOSE):
                    # Deliver every sample so far: the partial frame goes out padded.
                    await send(encoder.finish(), last=item == CLOSE)
                    if item == FLUSH:
                        await self.ws.send(p.encode("flushed", context_id=context.id))
                        continue
                    ms = round((encoder.samples - encoder.padding) * 1000 / c.sample_rate)  # without the padding
                    await self.ws.send(p.encode("done", context_id=context.id, audio_ms=ms))
                    break
                # Sentences queued behind these, up to a flush or close, go in one request.
                while not context.queue.empty() and pending is None:
                    more = context.queue.get_nowait()
                    if isinstance(more, list):
                        item += more
                    else:
                        pending = more
                start_ms = encoder.position * 1000 / c.sample_rate
                async for chunk in tts.synthesize(" ".join(item), c.voice_params):
                    if c.timestamps and chunk.words:
                        await self.ws.send(timestamps(context.id, chunk.words, start_ms))
                    await send(encoder.push(chunk.pcm))
        except BackendUnavailable as e:
            log.error("context %s: %s", context.id, e)
            await self._fail(context, p.BACKEND_UNAVAILABLE, str(e))
        except SynthesisError as e:
            log.warning("context %s: synthesis failed: %s", context.id, e)
            await self._fail(context, p.SYNTHESIS_FAILED, str(e))
        except ConnectionClosed:
            pass
        finally:
            tts.close()
            if self.contexts.get(context.id) is context and context.closed and context.queue.empty():
                del self.contexts[context.id]

    async def _fail(self, context: Context, code: str, message: str) -> None:
        self.contexts.pop(context.id, None)
        await self.ws.send(p.error(code, message, context.id))


def timestamps(context_id: str, words: list[tuple[str, int, int]], start_ms: float) -> str:
    """A `timestamps` message; word samples (voice rate) count from `start_ms`."""

    def ms(sample: int) -> int:
        return round(start_ms + sample * 1000 / VOICE_RATE)

    return p.encode(
        "timestamps", context_id=context_id, words=[w for w, _, _ in words],
        start_ms=[ms(a) for _, a, _ in words], end_ms=[ms(b) for _, _, b in words],
    )


def http_handler(settings: Settings, triton: grpcclient.InferenceServerClient):
    async def process_request(connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path == p.PATH:
            return None  # the WebSocket handshake goes on
        if path == "/healthz":
            try:
                ready = await triton.is_server_ready()
            except Exception:
                ready = False
            status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
            body = json.dumps({"gateway": "ok", "triton": "ready" if ready else "unavailable"}).encode()
            return Response(status.value, status.phrase, Headers({"Content-Type": "application/json"}), body)
        return static_file(connection, "index.html" if path == "/" else path.removeprefix("/static/"))

    return process_request


def static_file(connection: ServerConnection, name: str) -> Response:
    """A file of gateway/static, by plain name only: no directories, so no traversal."""
    path = STATIC / name
    if "/" in name or "\\" in name or name.startswith(".") or path.suffix not in CONTENT_TYPES or not path.is_file():
        return connection.respond(HTTPStatus.NOT_FOUND, "not found\n")
    headers = Headers({"Content-Type": CONTENT_TYPES[path.suffix], "Cache-Control": "no-cache"})
    return Response(HTTPStatus.OK.value, "OK", headers, path.read_bytes())


async def serve_forever(host: str, port: int, settings: Settings, ready: asyncio.Event | None = None) -> None:
    triton = grpcclient.InferenceServerClient(settings.triton_url)

    async def handler(ws: ServerConnection) -> None:
        await Session(ws, triton, settings).run()

    async with serve(handler, host, port, process_request=http_handler(settings, triton)) as server:
        log.info("gateway on ws://%s:%d%s, Triton at %s", host, port, p.PATH, settings.triton_url)
        if ready:
            ready.set()
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="speechstream-gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("GATEWAY_HOST", "127.0.0.1"), help="env GATEWAY_HOST")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GATEWAY_PORT", 8080)), help="env GATEWAY_PORT")
    parser.add_argument("--triton", default=os.environ.get("TRITON_GRPC_URL", "127.0.0.1:8001"), help="env TRITON_GRPC_URL")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(serve_forever(args.host, args.port, Settings(triton_url=args.triton)))


if __name__ == "__main__":
    main()
