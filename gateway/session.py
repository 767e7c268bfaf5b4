"""Protocol v1 sessions: one per WebSocket connection, one worker task per context.

Each context's worker owns one gRPC stream to Triton's `tts` model, turns its PCM into
frames and sends them in order. The socket is reached through `ClientSocket`, a small
adapter over aiohttp's WebSocket, so the session reads as plain send/receive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import WSMsgType, web

from python_backends.voice import DEFAULT_VOICE, sample_rate
from python_backends import contract as c

from . import protocol as p

from .audio import FrameEncoder
from .inbox import Inbox, Mark
from .segmenter import Segmenter
from .tts_client import BackendUnavailable, SynthesisError, TtsStream

if TYPE_CHECKING:
    from .server import Gateway

log = logging.getLogger("speechstream.gateway")

VOICE_RATE = sample_rate(DEFAULT_VOICE)
VOICES = (DEFAULT_VOICE,)
# Characters of whole sentences per `tts` request (about 30 s of speech): a request is
# synthesized to its end whatever the client does, so this bounds the work a paused
# (slow-reading) context has in flight.
REQUEST_CHARS = 400


class ConnectionClosed(Exception):
    """The client's WebSocket is closed or closing: nothing more goes either way."""


class ClientSocket:
    """The session's view of an aiohttp WebSocket: send a message, receive the next.

    `send` waits while the write buffer is over its limit (aiohttp drains it), which
    is the backpressure on a slow reader.
    """

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self._ws = ws

    async def send(self, message: str | bytes) -> None:
        if self._ws.closed:
            raise ConnectionClosed
        try:
            if isinstance(message, str):
                await self._ws.send_str(message)
            else:
                await self._ws.send_bytes(message)
        except ConnectionError as e:  # aiohttp's ClientConnectionResetError among them
            raise ConnectionClosed from e

    async def recv(self, timeout: float | None) -> str | bytes:
        """The next text or binary message; TimeoutError after `timeout` s (None: never)."""
        message = await self._ws.receive(timeout)
        if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
            return message.data
        raise ConnectionClosed  # CLOSE, CLOSING, CLOSED or ERROR: aiohttp has answered it

    async def close(self, code: int, reason: str) -> None:
        await self._ws.close(code=code, message=reason.encode())


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


class Session:
    """One WebSocket connection speaking protocol v1."""

    def __init__(self, ws: ClientSocket, gateway: Gateway, client: str) -> None:
        self.ws = ws
        self.client = client  # the peer's address, for the per-client connection cap
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
                    await self.send_error(c.INTERNAL_ERROR, "the server failed to handle this message")
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
                return await self.ws.recv(idle_s)
            except asyncio.TimeoutError:  # not the builtin on Python 3.10
                if any(context.busy for context in self.contexts.values()):
                    continue  # speaking is not idle; a context left open with nothing to say is
                log.info("session %s: idle for %g s, closing", self.id, idle_s)
                await self.send_error(c.IDLE_TIMEOUT, f"no message for {idle_s:g} s")
                await self.ws.close(1000, "idle timeout")
                return None

    def parse(self, frame: str | bytes) -> p.Config | p.ContextMessage:
        size = len(frame) if isinstance(frame, bytes) else len(frame.encode("utf-8", "surrogatepass"))
        if size > self.settings.max_message_bytes:
            raise p.ProtocolError(
                c.MESSAGE_TOO_LARGE, f"message of {size} bytes; the limit is {self.settings.max_message_bytes}"
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
                raise p.ProtocolError(c.CONFIG_TOO_LATE, "config must come before the first speak or text")
            self.config = message
            await self.send_ready()
            return
        context = self.contexts.get(message.context_id)
        if message.type in p.TEXT_TYPES:
            if context is None:
                context = await self.open(message.context_id)
            elif message.type == "speak":
                raise p.ProtocolError(c.CONTEXT_EXISTS, f"context '{message.context_id}' is already open", message.context_id)
            elif context.closed:
                raise p.ProtocolError(c.CONTEXT_CLOSED, f"context '{message.context_id}' is closed", message.context_id)
            self.append(context, message.text)
            if message.type == "speak":
                self.close(context)
            return
        if context is None:
            raise p.ProtocolError(c.UNKNOWN_CONTEXT, f"no open context '{message.context_id}'", message.context_id)
        if message.type == "cancel":
            context.task.cancel()
            del self.contexts[context.id]
            await self.ws.send(p.encode("cancelled", context_id=context.id))
        elif context.closed:
            raise p.ProtocolError(c.CONTEXT_CLOSED, f"context '{message.context_id}' is closed", message.context_id)
        elif message.type == "flush":
            context.submit(*context.segmenter.flush(), Mark.FLUSH)
        else:
            self.close(context)

    def append(self, context: Context, text: str) -> None:
        waiting = context.inbox.chars + len(context.segmenter.pending)
        if waiting + len(text) > self.settings.max_text_chars:
            raise p.ProtocolError(
                c.TEXT_TOO_LONG,
                f"{waiting} characters are already waiting for synthesis; the limit is {self.settings.max_text_chars}",
                context.id,
            )
        context.submit(*context.segmenter.append(text))

    async def open(self, context_id: str) -> Context:
        if len(self.contexts) >= self.settings.max_contexts:
            raise p.ProtocolError(c.TOO_MANY_CONTEXTS, f"at most {self.settings.max_contexts} open contexts", context_id)
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
            await self._fail(context, c.BACKEND_UNAVAILABLE, str(e))
        except SynthesisError as e:
            log.warning("context %s: synthesis failed: %s", context.id, e)
            await self._fail(context, c.SYNTHESIS_FAILED, str(e))
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("context %s: unexpected failure", context.id)
            await self._fail(context, c.INTERNAL_ERROR, "the server failed while speaking this context")
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
