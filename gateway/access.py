"""Who may use the gateway: the API key, the browser Origin allow-list and the
per-client connection cap. Each check answers with a `Refusal` (None: go on), which the
WebSocket upgrade sends as plain text and the OpenAI-style API as its JSON error."""

from __future__ import annotations

import hmac
import json
import logging
from dataclasses import dataclass, field
from http import HTTPStatus

from aiohttp import web

from .settings import Settings

log = logging.getLogger("speechstream.gateway")


@dataclass(frozen=True)
class Refusal:
    status: HTTPStatus
    message: str
    headers: dict[str, str] = field(default_factory=dict)

    def as_text(self) -> web.Response:
        return web.Response(status=self.status.value, text=self.message + "\n", headers=self.headers)


def json_response(status: HTTPStatus, body: dict) -> web.Response:
    return web.Response(status=status.value, body=json.dumps(body).encode(), content_type="application/json")


def unauthorized(request: web.Request, settings: Settings) -> Refusal | None:
    """401 for a request without the configured API key."""
    if not settings.api_key or hmac.compare_digest(presented_key(request).encode(), settings.api_key.encode()):
        return None
    return Refusal(HTTPStatus.UNAUTHORIZED, "a valid API key is required", {"WWW-Authenticate": "Bearer"})


def refused_origin(request: web.Request, settings: Settings) -> Refusal | None:
    """403 for a browser page from an Origin not allowed; requests without one pass."""
    origin = request.headers.getall("Origin", [])
    if not settings.allowed_origins or not origin or (len(origin) == 1 and origin[0] in settings.allowed_origins):
        return None
    log.warning("refused a request to %s from Origin %s", request.path, origin)
    return Refusal(HTTPStatus.FORBIDDEN, "this Origin is not allowed")


def too_many_connections(client: str, open_now: int, settings: Settings) -> Refusal | None:
    """429 for a client address at its connection cap (0: no cap)."""
    cap = settings.max_connections_per_client
    if not cap or open_now < cap:
        return None
    log.warning("refused a connection from %s: %d already open", client, open_now)
    return Refusal(HTTPStatus.TOO_MANY_REQUESTS, f"at most {cap} connections per client")


def presented_key(request: web.Request) -> str:
    """The API key in the `Authorization: Bearer`, `X-API-Key` header or `api_key` query;
    empty (refused) when absent or given more than once."""
    auth = request.headers.getall("Authorization", [])
    if auth:
        return auth[0][7:].strip() if len(auth) == 1 and auth[0].lower().startswith("bearer ") else ""
    key = request.headers.getall("X-API-Key", []) or request.query.getall("api_key", [])
    return key[0] if len(key) == 1 else ""
