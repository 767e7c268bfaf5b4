"""`speechstream-gateway`: protocol v1 over WebSocket and OpenAI's speech API over HTTP,
on one port, with audio from Triton's `tts` model.

This file assembles the application: the routes (websocket.py, http_api.py), and the
lifetime of the Triton health watch.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from aiohttp import web

from python_backends import contract as c

from . import http_api
from . import settings as s
from .backends import HEALTH_INTERVAL_S
from .service import GATEWAY, Gateway
from .settings import Settings
from .websocket import stream

log = logging.getLogger("speechstream.gateway")


def application(gateway: Gateway) -> web.Application:
    # A speech request body is one message: the same limit as on the WebSocket.
    app = web.Application(client_max_size=gateway.settings.max_message_bytes)
    app[GATEWAY] = gateway
    app.router.add_get(c.PROTOCOL_PATH, stream)
    app.router.add_post(http_api.SPEECH_PATH, http_api.speech)
    app.router.add_get("/healthz", http_api.healthz)
    app.router.add_get("/readyz", http_api.readyz)
    app.router.add_get("/metrics", http_api.metrics)
    app.router.add_get("/v1/voices", http_api.voices)
    app.router.add_get("/", http_api.page)
    app.router.add_static("/static/", http_api.STATIC)
    return app


async def serve_forever(settings: Settings) -> None:
    gateway = Gateway(settings)
    watch = asyncio.create_task(gateway.synthesizer.watch(HEALTH_INTERVAL_S, settings.probe_interval_s))
    runner = web.AppRunner(application(gateway), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, settings.host, settings.port).start()
        log.info("gateway on http://%s:%d (WebSocket %s), Triton at %s", settings.host, settings.port,
                 c.PROTOCOL_PATH, ", ".join(settings.triton_urls))
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
