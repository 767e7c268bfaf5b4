"""What a gateway's connections share: settings, the Triton servers and the synthesizer
over them, the live sessions, and the metrics read from them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import weakref
from collections import Counter
from collections.abc import Iterator

from aiohttp import web

from contract.voices import find_voices
from gateway.backends import discovery
from gateway.backends.servers import Backends
from gateway.backends.synthesis import Synthesizer
from gateway.backends.thinking import Thinker
from gateway.conversation.contexts import Limits
from gateway.conversation.pace import Pace
from gateway.conversation.speaking import Speaking
from gateway.conversation.start_gate import SpeakingPace
from gateway.edge.access import KeyFailures, log_refusal
from gateway.edge.admission import AdmissionQueue, keeping_ahead
from gateway.edge.metrics import Metrics
from gateway.edge.workers import Worker
from gateway.messages import ProtocolError
from gateway.settings import Settings
from speechstream import protocol as v1

# A hint for a client refused a stream: its own streams end in seconds, not milliseconds.
STREAM_RETRY_MS = 1000
# A hint for a client refused for want of capacity: a stream ends every few seconds.
BUSY_RETRY_MS = 2000
# How often the admission queue is offered the capacity that streams ending freed.
QUEUE_INTERVAL_S = 0.1
# A hint for a client refused by a stopping gateway: connect again at once (elsewhere).
DRAIN_RETRY_MS = 0
# How often a draining gateway looks whether its streams have ended.
DRAIN_POLL_S = 0.1
log = logging.getLogger("speechstream.gateway")


class Gateway:
    def __init__(self, settings: Settings, worker: Worker | None = None) -> None:
        self.settings = settings
        self.worker = worker  # one of several gateway processes on the port (workers.py)
        # VoiceError, saying what to fix, at start-up
        self.voices = find_voices(settings.voices, ar=settings.ar_model is not None)
        self.limits = Limits.of(settings)
        self.pace = SpeakingPace()  # learned from every session's jobs, for their start gates
        # A DNS name's servers are found once running (discovery.watch); BadAddress at start-up.
        self.service = discovery.Address.parse(settings.triton_service) if settings.triton_service else None
        self.dns = discovery.Address.parse(settings.dns, discovery.DNS_PORT) if settings.dns else None
        self.backends = Backends(() if self.service else settings.triton_urls)
        self.key_failures = KeyFailures(settings.max_key_failures)
        self.sessions: dict[Speaking, str] = {}  # each open session's contexts, and its client's address
        self.realtime_sessions: set[Speaking] = set()  # those of them that speak the Realtime API
        self.http_streams: Counter[str] = Counter()  # HTTP speech requests in flight, by address
        self.http_paces: set[Pace] = set()  # the streamed bodies among them
        self.queue = AdmissionQueue(settings.admission_queue)  # streams waiting for capacity
        self.draining = False  # stopping: no new stream, the open ones finish (drain)
        self.metrics = Metrics(
            connections=lambda: len(self.sessions),
            contexts=lambda: sum(len(s.contexts) for s in self.sessions),
            speaking=self.speaking_contexts,
            backends=self.backends,
            realtime=lambda: len(self.realtime_sessions),
        )
        # chat mode: the Thinker's requests, when Triton serves a chat model
        self.thinker = Thinker(self.backends, settings.stage_timeout_s) if settings.chat_model else None
        self.synthesizer = Synthesizer(
            self.backends, settings.stage_timeout_s, self.metrics.triton_first_response,
            models={name: voice.tts_model for name, voice in self.voices.items()},
            resume_s=settings.resume_within_s, resumed=self.metrics.resumed,
            max_lead_s=settings.max_lead_s, paused=self.metrics.paused,
        )

    def streams_by_client(self) -> Counter[str]:
        """Open contexts on all connections (not those queued) and HTTP speech requests,
        by client address."""
        streams = Counter(self.http_streams)
        for session, address in self.sessions.items():
            streams[address] += session.streams
        return +streams  # without the addresses at 0

    def leads(self, but: tuple[Speaking, str] | None = None, client: str | None = None) -> list[float]:
        """How far each stream being spoken is ahead of its listener, in seconds of audio:
        contexts on all connections (but a session's context `but`) and streamed HTTP
        speech bodies; only `client`'s, if named."""
        now = time.monotonic()
        bodies = [lead for pace in self.http_paces
                  if client in (None, pace.client) and (lead := pace.lead_s(now)) is not None]
        contexts = [lead for s, address in self.sessions.items() if client in (None, address)
                    for lead in s.leads(but[1] if but and s is but[0] else None)]
        return contexts + bodies

    def starts_in_time(self, session: Speaking, context_id: str, in_hand_s: float) -> bool:
        """Whether the session's context, starting with `in_hand_s` of audio, will get the
        rest in time: its client's share of the servers (the admitted load split evenly
        among the addresses with streams open, as `tts` splits its slots among clients)
        has room for a stream more than the client has open (this one included), and
        every other stream of the client's being spoken has sounded and is further ahead
        of its listener, so its next calls have the earliest deadlines among the client's.
        The other clients' streams do not count: `tts` serves each client its share
        first, however far behind theirs are, so a flood cannot hold this start. Not known
        while the servers serve streams through other gateways, whose clients are not
        known here."""
        capacity, elsewhere = self.backends.capacity, self.backends.elsewhere
        if not capacity or elsewhere:
            return False
        client, streams = self.sessions[session], self.streams_by_client()
        share = (self.settings.admission_load or 1.0) * capacity / max(1, len(streams))
        leads = self.leads((session, context_id), client)
        return share - streams[client] >= 1 and min(leads, default=math.inf) >= in_hand_s

    def others_starting(self, session: Speaking, context_id: str) -> int:
        """Streams being spoken, but the session's context, that await their first audio:
        contexts on all connections, and HTTP speech requests."""
        return sum(p.starting for p in self.http_paces) + sum(
            ctx.starting for s in self.sessions for ctx in s.contexts.values() if not (s is session and ctx.id == context_id))

    def others_first_s(self, session: Speaking, context_id: str, first_chunk_s: float) -> float:
        """How long the servers will take to make the first chunks of the streams starting
        (others_starting), each of `first_chunk_s` of audio, at the capacity they measure:
        unbounded while some start and none has measured it."""
        if not (starting := self.others_starting(session, context_id)):
            return 0.0
        capacity = self.backends.capacity
        return starting * first_chunk_s / capacity if capacity else math.inf

    def speaking_contexts(self) -> int:
        """Contexts with text in hand, on all connections."""
        return sum(ctx.busy for s in self.sessions for ctx in s.contexts.values())

    def speaking(self) -> int:
        """Streams being spoken now: contexts with text in hand, and HTTP speech requests."""
        return self.speaking_contexts() + self.http_streams.total()

    async def drain(self, bound_s: float) -> None:
        """Stop taking streams and give those being spoken up to `bound_s` to end."""
        self.draining = True
        if speaking := self.speaking():
            log.info("draining: %d streams speaking; waiting up to %.0f s for them", speaking, bound_s)
        deadline = asyncio.get_running_loop().time() + bound_s
        while self.speaking() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(DRAIN_POLL_S)
        if left := self.speaking():
            log.warning("drained for %.0f s; %d streams still speaking are cut", bound_s, left)

    def stream_refusal(self, client: str) -> ProtocolError | None:
        """Why `client` may not start another stream now, or None: the gateway is stopping
        (draining), its address is at its cap, or the streams open (this gateway's, and the
        other gateways' on the same servers) fill the capacity the Tritons measure and the
        client has its fair share of what is left to this gateway already (admission)."""
        if self.draining:
            log_refusal(f"a stream from {client}: the gateway is stopping")
            return ProtocolError(v1.SERVER_DRAINING, "this gateway is stopping; connect again",
                                 retry_after_ms=DRAIN_RETRY_MS)
        streams, cap = self.streams_by_client(), self.settings.max_streams_per_client
        if cap and streams[client] >= cap:
            log_refusal(f"a stream from {client}: {cap} already open")
            return ProtocolError(
                v1.TOO_MANY_STREAMS, f"at most {cap} streams at once per client", retry_after_ms=STREAM_RETRY_MS
            )
        # The share of the servers' capacity that other gateways' streams leave this one.
        load, capacity, elsewhere = self.settings.admission_load, self.backends.capacity, self.backends.elsewhere
        # Streams through other gateways count as at their deadlines: their leads are not known here.
        if load and capacity and not admits(streams, client, load * capacity - elsewhere, elsewhere) and not keeping_ahead(
            self.leads() + [0.0] * elsewhere, streams.total() + elsewhere, capacity, self.settings.admission_slack_s,
            self.settings.admission_peak,
        ):
            log_refusal(f"a stream from {client}: the servers are at capacity ({capacity:.1f} real-time streams, "
                        f"{elsewhere} streams through other gateways)")
            return ProtocolError(v1.SERVER_BUSY, "the server is at capacity; try again shortly",
                                 retry_after_ms=BUSY_RETRY_MS)
        return None

    async def admit_queued(self, interval_s: float = QUEUE_INTERVAL_S) -> None:
        """For ever: admit the queued streams that the capacity now allows, in order."""
        while True:
            await asyncio.sleep(interval_s)
            if self.queue:
                self.queue.pump(lambda client: self.stream_refusal(client) is None)

    @contextlib.contextmanager
    def http_stream(self, client: str) -> Iterator[Pace]:
        """Count an HTTP speech request among the address's streams while it runs; its
        Pace is told the audio of a streamed body as it goes out."""
        self.http_streams[client] += 1
        pace = Pace(client)
        self.http_paces.add(pace)
        try:
            yield pace
        finally:
            self.http_paces.discard(pace)
            self.http_streams[client] -= 1
            if not self.http_streams[client]:
                del self.http_streams[client]


def admits(streams: Counter[str], client: str, limit: float, elsewhere: int = 0) -> bool:
    """Whether `client` may open another stream: while the streams open, this one
    included, stay within `limit` (under it by a fraction of a stream is not room for a
    whole one), or none is open here nor through other gateways (`elsewhere`, which
    `limit` leaves out) and there is room at all (servers that sustain less than one
    stream still serve one); beyond that while the client has fewer than its fair share
    of `limit` (a whole share each among the clients with streams open, itself included),
    so that one client cannot take the whole capacity from the others."""
    if streams.total() + 1 <= limit or (not streams.total() and not elsewhere and limit > 0):
        return True
    clients = len(streams.keys() | {client})
    return streams[client] < limit // clients


GATEWAY = web.AppKey("gateway", Gateway)  # the application's Gateway
# The application's open WebSockets, closed on shutdown.
WEBSOCKETS = web.AppKey("websockets", weakref.WeakSet[web.WebSocketResponse])
