"""`speechstream-gateway`: protocol v1 over WebSocket and OpenAI's speech API over HTTP,
on one port, with audio from Triton's `tts` model.

This file assembles the application: the routes (websocket.py, http_api.py), and the
lifetime of the Triton health watch.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource

from aiohttp import web
from contract.voices import VoiceError

from gateway import http_api
from gateway import settings as s
from gateway.backends import HEALTH_INTERVAL_S
from gateway.listener import listen
from gateway.service import GATEWAY, Gateway
from gateway.settings import Settings
from gateway.websocket import stream
from contract import protocol as v1

log = logging.getLogger("speechstream.gateway")


def application(gateway: Gateway) -> web.Application:
    # A speech request body is one message: the same limit as on the WebSocket.
    app = web.Application(client_max_size=gateway.settings.max_message_bytes)
    app[GATEWAY] = gateway
    app.router.add_get(v1.PROTOCOL_PATH, stream)
    app.router.add_post(http_api.SPEECH_PATH, http_api.speech)
    app.router.add_get("/healthz", http_api.healthz)
    app.router.add_get("/readyz", http_api.readyz)
    app.router.add_get("/metrics", http_api.metrics)
    app.router.add_get("/v1/voices", http_api.voices)
    app.router.add_get("/v1/audio/voices", http_api.audio_voices)
    app.router.add_get("/v1/models", http_api.models)
    for path in (http_api.SPEECH_PATH, "/v1/voices", "/v1/audio/voices", "/v1/models"):
        app.router.add_route("OPTIONS", path, http_api.preflight)
    app.on_response_prepare.append(http_api.on_prepare)
    app.router.add_get("/", http_api.page)
    app.router.add_static("/static/", http_api.STATIC)
    return app


async def serve_forever(settings: Settings) -> None:
    gateway = Gateway(settings)
    watch = asyncio.create_task(gateway.synthesizer.watch(HEALTH_INTERVAL_S, settings.probe_interval_s))
    admit_queued = asyncio.create_task(gateway.admit_queued())
    # aiohttp's keepalive timeout runs from the connection's start until a request's head
    # is read, and between requests: the bound on slow and silent clients.
    runner = web.AppRunner(application(gateway), access_log=None, keepalive_timeout=settings.header_timeout_s)
    await runner.setup()
    raise_open_file_limit(settings.max_connections)
    listener = await listen(runner.server, settings)
    try:
        log.info("gateway on http://%s:%d (WebSocket %s), Triton at %s", settings.host, settings.port,
                 v1.PROTOCOL_PATH, ", ".join(settings.triton_urls))
        await asyncio.Event().wait()
    finally:
        watch.cancel()
        admit_queued.cancel()
        listener.close()
        await runner.cleanup()


def raise_open_file_limit(connections: int) -> None:
    """Raise the soft limit on open files to the hard one: each connection is a file, and
    a process out of them cannot even refuse a connection politely."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    except (ValueError, OSError):  # an unlimited hard limit is more than the kernel allows
        pass
    if soft != resource.RLIM_INFINITY and (not connections or connections + 256 > soft):
        log.warning("the open-file limit (%d) leaves too little room for --max-connections %d: lower it, or "
                    "raise the limit (ulimit -n)", soft, connections)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="speechstream-gateway", description=__doc__.splitlines()[0])
    s.add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(serve_forever(s.from_arguments(args)))
    except VoiceError as e:
        log.error("%s", e)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
