"""Who may use the gateway: the API key and the browser Origin allow-list. Each check
answers with a `Refusal` (None: go on), which the WebSocket upgrade sends as plain text
and the OpenAI-style API as its JSON error."""

from __future__ import annotations

import hmac
import json
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

from aiohttp import web

from gateway.settings import Settings

log = logging.getLogger("speechstream.gateway")


@dataclass(frozen=True)
class Refusal:
    status: HTTPStatus
    message: str
    headers: dict[str, str] = field(default_factory=dict)

    def as_text(self) -> web.Response:
        return web.Response(status=self.status.value, text=self.message + "\n", headers=self.headers)

    def as_http(self) -> bytes:
        """A whole HTTP/1.1 response that ends the connection, for a refusal made before
        any request is read."""
        body = (self.message + "\n").encode()
        head = [f"HTTP/1.1 {self.status.value} {self.status.phrase}", "Content-Type: text/plain; charset=utf-8",
                f"Content-Length: {len(body)}", "Connection: close", *(f"{k}: {v}" for k, v in self.headers.items())]
        return "\r\n".join(head).encode() + b"\r\n\r\n" + body


def json_response(status: HTTPStatus, body: dict) -> web.Response:
    return web.Response(status=status.value, body=json.dumps(body).encode(), content_type="application/json")


class KeyFailures:
    """Wrong API keys per client address, so that keys cannot be guessed at speed: past
    `limit` failures within `window_s`, the address is refused until the oldest of them
    leaves the window (0: no limit). Sans I/O; `clock` is injected."""

    def __init__(self, limit: int, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, client: str) -> float | None:
        """Seconds until `client` may try a key again; None when it may now."""
        failures = self._recent(client)
        if not self.limit or len(failures) < self.limit:
            return None
        return failures[0] + self.window_s - self.clock()

    def failed(self, client: str) -> None:
        if self.limit:
            self._recent(client).append(self.clock())

    def _recent(self, client: str) -> deque[float]:
        """`client`'s failures within the window; addresses with none are forgotten."""
        now = self.clock()
        for address in [client] if len(self._failures) < 1024 else list(self._failures):
            failures = self._failures.get(address, deque())
            while failures and failures[0] <= now - self.window_s:
                failures.popleft()
            if not failures:
                self._failures.pop(address, None)
        return self._failures.setdefault(client, deque())


def unauthorized(request: web.Request, settings: Settings, failures: KeyFailures) -> Refusal | None:
    """401 for a request without the configured API key; 429 for an address that has
    sent too many wrong keys lately."""
    if not settings.api_key:
        return None
    client = request.remote or ""
    if (wait := failures.retry_after(client)) is not None:
        return Refusal(HTTPStatus.TOO_MANY_REQUESTS, "too many wrong API keys; try again later",
                       {"Retry-After": str(math.ceil(wait))})
    if hmac.compare_digest(presented_key(request).encode(), settings.api_key.encode()):
        return None
    failures.failed(client)
    log_refusal(f"a wrong or missing API key from {client}")
    return Refusal(HTTPStatus.UNAUTHORIZED, "a valid API key is required", {"WWW-Authenticate": "Bearer"})


_last_logged: dict[str, float] = {}


def log_refusal(what: str, every_s: float = 10.0) -> None:
    """Log a refusal at most once per `every_s` for the same kind, so that a flood of
    them cannot fill the log."""
    kind = what.split(" from ")[0]
    now = time.monotonic()
    if now - _last_logged.get(kind, -math.inf) >= every_s:
        _last_logged[kind] = now
        log.warning("refused %s", what)


def origin_allowed(origin: list[str], settings: Settings) -> bool:
    """Whether the Origin header's values name one allowed Origin (any, without an allow-list)."""
    return not settings.allowed_origins or (len(origin) == 1 and origin[0] in settings.allowed_origins)


def refused_origin(request: web.Request, settings: Settings) -> Refusal | None:
    """403 for a browser page from an Origin not allowed; requests without one pass."""
    origin = request.headers.getall("Origin", [])
    if not origin or origin_allowed(origin, settings):
        return None
    log_refusal(f"a request to {request.path} from Origin {origin}")
    return Refusal(HTTPStatus.FORBIDDEN, "this Origin is not allowed")


# What a page on another origin may send and read (CORS), for the API a browser can use.
CORS_METHODS = "GET, POST, OPTIONS"
CORS_REQUEST_HEADERS = "Authorization, Content-Type, X-API-Key, X-Request-ID"
CORS_EXPOSED_HEADERS = "X-Request-ID, Retry-After"
CORS_MAX_AGE_S = 600


def cors_headers(request: web.Request, settings: Settings) -> dict[str, str]:
    """The CORS headers for a request from a page on an allowed Origin (any, without an
    allow-list); none for other requests. No cookies are used, so no credentials."""
    origin = request.headers.getall("Origin", [])
    if len(origin) != 1 or not origin_allowed(origin, settings):
        return {}
    return {"Access-Control-Allow-Origin": origin[0], "Access-Control-Expose-Headers": CORS_EXPOSED_HEADERS,
            "Vary": "Origin"}


def preflight_headers(request: web.Request, settings: Settings) -> dict[str, str] | None:
    """The answer to a CORS preflight (OPTIONS) from an allowed Origin; None: refused."""
    headers = cors_headers(request, settings)
    if not headers:
        return None
    return headers | {"Access-Control-Allow-Methods": CORS_METHODS,
                      "Access-Control-Allow-Headers": CORS_REQUEST_HEADERS,
                      "Access-Control-Max-Age": str(CORS_MAX_AGE_S)}


def request_id(request: web.Request) -> str:
    """The client's X-Request-ID when it is a short printable token, else a new one."""
    given = request.headers.get("X-Request-ID", "")
    return given if 0 < len(given) <= 128 and given.isascii() and given.isprintable() else uuid.uuid4().hex


def presented_key(request: web.Request) -> str:
    """The API key in the `Authorization: Bearer`, `X-API-Key` header or `api_key` query;
    empty (refused) when absent or given more than once."""
    auth = request.headers.getall("Authorization", [])
    if auth:
        return auth[0][7:].strip() if len(auth) == 1 and auth[0].lower().startswith("bearer ") else ""
    key = request.headers.getall("X-API-Key", []) or request.query.getall("api_key", [])
    return key[0] if len(key) == 1 else ""
