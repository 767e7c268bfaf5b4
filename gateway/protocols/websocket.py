"""GET /v1/stream and GET /v1/realtime: the asyncio shell around a protocol-v1 `Session`
(or OpenAI's Realtime API's session over one, gateway/protocols/realtime.py).

It admits the client, upgrades the connection, feeds the session each client frame, and
carries out the actions it answers with; the backend work they start is run by one
runner per kind (gateway/protocols/runners.py), which feed the session its events. Audio goes out
through a bounded write buffer: while it is full, `send` waits, and so does the job
whose audio it is, which then reads no more from Triton — the backpressure on a slow
reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from aiohttp import WSMsgType, web

from gateway.conversation.actions import Action, Close, Hear, Send, Stop, StopThinking, Synthesize, Think
from gateway.edge.access import Refusal, log_refusal, refused_origin, unauthorized
from gateway.edge.admission import Waiter
from gateway.edge.service import GATEWAY, WEBSOCKETS, Gateway
from gateway.messages import ProtocolError
from gateway.protocols.backlog import Backlog, frame_bytes, kernel_unsent
from gateway.protocols.realtime import RealtimeSession
from gateway.protocols.runners import (
    ConnectionClosed,
    JobUnwanted,
    RecognitionRunner,
    SynthesisRunner,
    ThinkingRunner,
)
from gateway.protocols.session import Session

REALTIME_PATH = "/v1/realtime"
FRAME_HEADER_BYTES = 10  # the longest a server's WebSocket frame header can be (RFC 6455 5.2)
async def stream(request: web.Request) -> web.StreamResponse:
    """Admit the client, then speak protocol v1 until it leaves."""
    return await serve(request)


async def realtime(request: web.Request) -> web.StreamResponse:
    """GET /v1/realtime: OpenAI's Realtime API, a RealtimeSession over a v1 session on the
    same shell. The beta dialect where the client says `OpenAI-Beta: realtime=v1`; a
    transcription session where it asks `?intent=transcription`."""
    beta = request.headers.get("OpenAI-Beta", "").replace(" ", "").startswith("realtime=v1")
    model = request.query.get("model") or "speechstream"
    transcription = request.query.get("intent") == "transcription"
    return await serve(request, lambda inner: RealtimeSession(inner, beta, model, transcription))


async def serve(request: web.Request, protocol: Callable[[Session], Any] = lambda session: session) -> web.StreamResponse:
    """Admit the client, upgrade, then speak `protocol` (over a v1 session) until it leaves."""
    gateway = request.app[GATEWAY]
    settings = gateway.settings
    if refusal := unauthorized(request, settings, gateway.key_failures) or refused_origin(request, settings):
        return refusal.as_text()
    ws = web.WebSocketResponse(
        max_msg_size=settings.max_frame_bytes,  # past it: close 1009
        writer_limit=settings.max_buffered_bytes,
        compress=False,  # Opus does not deflate; compressing it would only cost CPU
    )
    if not ws.can_prepare(request).ok:
        return Refusal(HTTPStatus.UPGRADE_REQUIRED, "this path takes a WebSocket upgrade").as_text()
    limit_buffers(request, settings.max_buffered_bytes)
    await ws.prepare(request)
    request.app[WEBSOCKETS].add(ws)
    client = request.remote or ""
    connection = Connection(ws, gateway, client, request.transport, protocol)
    speaking = connection.session.speaking
    gateway.sessions[speaking] = client
    if isinstance(connection.session, RealtimeSession):
        gateway.realtime_sessions.add(speaking)
    try:
        await connection.run()
    finally:
        del gateway.sessions[speaking]
        gateway.realtime_sessions.discard(speaking)
    return ws


def limit_buffers(request: web.Request, size: int) -> None:
    """The transport and the kernel each hold no more than `size` unsent bytes: past
    both, `send` waits and the slow reader's synthesis pauses."""
    request.transport.set_write_buffer_limits(high=size)
    sock = request.transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


class Connection:
    """One WebSocket: its session, and the runners of its backend work. It is also the
    session's Admission: the gateway's refusal, and its queue."""

    def __init__(
        self, ws: web.WebSocketResponse, gateway: Gateway, client: str, transport: asyncio.Transport,
        protocol: Callable[[Session], Any] = lambda session: session,
    ) -> None:
        self.ws = ws
        self.gateway = gateway
        self.client = client
        self.transport = transport
        self.socket = transport.get_extra_info("socket")
        self.backlog = Backlog(time.monotonic())  # the audio sent, until the client takes it
        # The protocol's session: v1's, or one that speaks another protocol over it.
        self.session = protocol(Session(gateway.limits, gateway.metrics, admission=self, voices=gateway.voices,
                                        chat=gateway.thinker is not None, listen=gateway.settings.listen,
                                        start_when_safe=gateway.settings.start_when_safe, pace=gateway.pace))
        self.synthesis = SynthesisRunner(self.session, self, gateway.synthesizer, client)
        self.thinking = ThinkingRunner(self.session, self, gateway.thinker)  # chat mode's
        self.recognition = RecognitionRunner(self.session, self, gateway.backends)  # listen mode's
        self.queue_tasks: set[asyncio.Task] = set()  # carrying out what the admission queue's turns said
        self.in_order = asyncio.Lock()  # so that those go out in the order of the turns

    def refusal(self) -> ProtocolError | None:
        return self.gateway.stream_refusal(self.client)

    def wait(self, context_id: str) -> int | None:
        return self.gateway.queue.join(Waiter(
            (self, context_id), self.client,
            admitted=lambda: self.later(self.session.admitted(context_id)),
            moved=lambda position: self.later(self.session.moved(context_id, position)),
        ))

    def leave(self, context_id: str) -> None:
        self.gateway.queue.leave((self, context_id))

    def starts_in_time(self, context_id: str, in_hand_s: float) -> bool:
        return self.gateway.starts_in_time(self.session.speaking, context_id, in_hand_s)

    def others_first_s(self, context_id: str, first_chunk_s: float) -> float:
        return self.gateway.others_first_s(self.session.speaking, context_id, first_chunk_s)

    def later(self, actions: list[Action]) -> None:
        """Carry out `actions`, which the queue's turn produced outside this connection's
        own flow, in a task of their own."""

        async def act() -> None:
            async with self.in_order:
                with contextlib.suppress(ConnectionClosed):
                    await self.act(actions)

        task = asyncio.create_task(act())
        self.queue_tasks.add(task)
        task.add_done_callback(self.queue_tasks.discard)

    async def run(self) -> None:
        try:
            await self.act(self.session.start())
            while (frame := await self.receive()) is not None:
                await self.act(self.session.receive(frame))
        except ConnectionClosed:
            pass
        finally:
            await self.recognition.close()
            await self.act(self.session.abort())  # only Stops: nothing is sent

    async def receive(self) -> str | bytes | None:
        """The next client frame; None once the connection is closed or closed as idle."""
        idle_s = self.gateway.settings.idle_timeout_s or None  # 0: never
        while True:
            try:
                message = await self.ws.receive(idle_s)
            except asyncio.TimeoutError:  # not the builtin on Python 3.10
                if actions := self.session.idle(idle_s):
                    await self.act(actions)
                    return None
                continue
            if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                return message.data
            return None  # CLOSE, CLOSING, CLOSED or ERROR: aiohttp has answered it

    async def act(self, actions: list[Action], job_id: int | None = None) -> None:
        """Carry out `actions`; those of job `job_id` only while it is wanted (JobUnwanted
        once not): a send can wait for the client, and a `cancelled` sent meanwhile must
        be the context's last word."""
        for action in actions:
            if job_id is not None and not self.session.is_current(job_id):
                raise JobUnwanted
            if isinstance(action, Send):
                await self.send(action.data, action.audio_s)
            elif isinstance(action, Synthesize):
                if self.session.is_current(action.job.id):  # not cancelled while sending
                    self.synthesis.start(action.job)
            elif isinstance(action, Stop):
                self.synthesis.stop(action.job_id)
            elif isinstance(action, Think):
                self.thinking.start(action)
            elif isinstance(action, StopThinking):
                self.thinking.stop(action.think_id)
            elif isinstance(action, Hear):
                self.recognition.hear(action)
            elif isinstance(action, Close):
                await self.ws.close(code=action.code, message=action.reason.encode())

    async def send(self, data: str | bytes, audio_s: float = 0.0) -> None:
        """Send, waiting while the write buffer is full; a client that reads nothing for
        the send timeout is dropped (closing politely would wait on the same buffer).
        `audio_s`: the audio the message carries, unread until its bytes are taken."""
        if self.ws.closed:
            raise ConnectionClosed
        sending = self.ws.send_str(data) if isinstance(data, str) else self.ws.send_bytes(data)
        # A send that fits the buffer cannot wait, so it needs no timeout: wait_for's task
        # costs ten times the send itself, once per 20 ms frame.
        size = len(data) if isinstance(data, bytes) else 4 * len(data)  # UTF-8: at most 4 bytes a character
        timeout_s = None if self._fits(size) else self.gateway.settings.send_timeout_s or None
        # Counted as it goes to the transport (the send's first step), not once a full
        # buffer has let it through: a send that waits holds bytes the client has not taken.
        self.backlog.sent(frame_bytes(size if isinstance(data, bytes) else len(data.encode())), audio_s)
        try:
            await (sending if timeout_s is None else asyncio.wait_for(sending, timeout_s))
        except asyncio.TimeoutError:  # not the builtin on Python 3.10
            log_refusal(f"a client that read nothing for {self.gateway.settings.send_timeout_s:g} s from {self.client}")
            self.transport.abort()
            raise ConnectionClosed from None
        except ConnectionError as e:  # aiohttp's ClientConnectionResetError among them
            raise ConnectionClosed from e

    def unread_s(self) -> float:
        """The audio sent that the client has not taken yet: its streams' lead. A client
        that has taken none of it for the send timeout is dropped (ConnectionClosed), as
        one whose send waits that long: its paused streams would hold their places forever."""
        now = time.monotonic()
        unread = self.backlog.unread_s(self.transport.get_write_buffer_size() + kernel_unsent(self.socket), now)
        timeout_s = self.gateway.settings.send_timeout_s
        if timeout_s and self.backlog.stalled_s(now) > timeout_s:
            log_refusal(f"a client that read nothing for {timeout_s:g} s from {self.client}")
            self.transport.abort()
            raise ConnectionClosed
        return unread

    def _fits(self, size: int) -> bool:
        """Whether a message of `size` bytes can be written without the write pausing:
        the buffer is at or below its low mark, where the transport resumes writing, and
        stays at or below its high mark, past which it pauses."""
        low, high = self.transport.get_write_buffer_limits()
        buffered = self.transport.get_write_buffer_size()
        return buffered <= low and buffered + size + FRAME_HEADER_BYTES <= high
