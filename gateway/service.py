"""What a gateway's connections share: settings, the Triton servers and the synthesizer
over them, the live sessions, and the metrics read from them."""

from __future__ import annotations

from aiohttp import web

from .access import KeyFailures
from .backends import Backends
from .metrics import Metrics
from .session import Limits, Session
from .settings import Settings
from .synthesis import Synthesizer


class Gateway:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.limits = Limits(settings.max_text_chars, settings.max_contexts, settings.max_message_bytes)
        self.backends = Backends(settings.triton_urls)
        self.key_failures = KeyFailures(settings.max_key_failures)
        self.sessions: dict[Session, str] = {}  # each open session, and its client's address
        self.metrics = Metrics(
            connections=lambda: len(self.sessions),
            contexts=lambda: sum(len(s.contexts) for s in self.sessions),
            speaking=lambda: sum(c.busy for s in self.sessions for c in s.contexts.values()),
            backends=self.backends.all,
        )
        self.synthesizer = Synthesizer(self.backends, settings.stage_timeout_s, self.metrics.triton_first_response)

    def connections_from(self, client: str) -> int:
        return sum(1 for address in self.sessions.values() if address == client)


GATEWAY = web.AppKey("gateway", Gateway)  # the application's Gateway
