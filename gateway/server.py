"""`speechstream-gateway`: protocol v1 over WebSocket and OpenAI's speech and
transcription APIs over HTTP, on one port, with audio from Triton's `tts` model (and
transcripts from its `asr` model, in listen mode).

This file assembles the application: the routes (websocket.py, http_api.py,
transcription_api.py), and its lifetime as aiohttp runs it: the Triton health watch, the DNS watch (with
--triton-service), the reading of the streams each Triton serves (for admission) and the
admission queue run in the app's cleanup context and are awaited when it ends; on shutdown each open WebSocket is
closed with 1001 (going away), and the gRPC channels to Triton are closed last. SIGTERM
and SIGINT stop the gateway that way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import gc
import logging
import os
import resource
import signal
import weakref
from collections.abc import AsyncIterator, Awaitable

from aiohttp import WSCloseCode, web

from contract.voices import VoiceError
from gateway import settings as s
from gateway.backends import discovery, fleet
from gateway.backends.servers import HEALTH_INTERVAL_S
from gateway.edge.guard import open_server
from gateway.edge.service import GATEWAY, WEBSOCKETS, Gateway
from gateway.edge.workers import WORKER_ENV, Worker, from_environment, serve_workers
from gateway.protocols import http_api, transcription_api
from gateway.protocols.websocket import REALTIME_PATH, realtime, stream
from gateway.settings import Settings
from speechstream import protocol as v1

log = logging.getLogger("speechstream.gateway")
# How long shutdown waits for handlers still running once the WebSockets are closed (an
# HTTP speech response mid-body) before it cancels them.
SHUTDOWN_TIMEOUT_S = 5.0


def application(gateway: Gateway) -> web.Application:
    # A speech request body is one message: the same limit as on the WebSocket.
    app = web.Application(client_max_size=gateway.settings.max_message_bytes)
    app[GATEWAY] = gateway
    app[WEBSOCKETS] = weakref.WeakSet()
    app.router.add_get(v1.PROTOCOL_PATH, stream)
    app.router.add_get(REALTIME_PATH, realtime)
    app.router.add_post(http_api.SPEECH_PATH, http_api.speech)
    app.router.add_post(transcription_api.TRANSCRIPTIONS_PATH, transcription_api.transcriptions)
    app.router.add_get("/healthz", http_api.healthz)
    app.router.add_get("/readyz", http_api.readyz)
    app.router.add_get("/metrics", http_api.metrics)
    app.router.add_get("/v1/voices", http_api.voices)
    app.router.add_get("/v1/audio/voices", http_api.audio_voices)
    app.router.add_get("/v1/models", http_api.models)
    for path in (http_api.SPEECH_PATH, transcription_api.TRANSCRIPTIONS_PATH, "/v1/voices", "/v1/audio/voices",
                 "/v1/models"):
        app.router.add_route("OPTIONS", path, http_api.preflight)
    app.on_response_prepare.append(http_api.on_prepare)
    app.router.add_get("/", http_api.page)
    app.router.add_static("/static/", http_api.STATIC)
    app.cleanup_ctx.append(background_tasks)
    app.on_shutdown.append(close_websockets)
    return app


async def answer_for_itself(gateway: Gateway, worker: Worker) -> web.AppRunner:
    """A worker's own /metrics and /readyz, on its loopback port, for its siblings to read."""
    app = web.Application()
    app[GATEWAY] = gateway
    app.router.add_get("/metrics", http_api.worker_metrics)
    app.router.add_get("/readyz", http_api.worker_readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", worker.port).start()
    return runner


async def background_tasks(app: web.Application) -> AsyncIterator[None]:
    """The Triton health watch, the DNS watch, the fleet's load and the admission
    queue's pump, for the app's lifetime; then the gRPC channels, which the stopped
    tasks and streams no longer use."""
    gateway, settings = app[GATEWAY], app[GATEWAY].settings
    tasks = [
        asyncio.create_task(gateway.synthesizer.watch(HEALTH_INTERVAL_S, settings.probe_interval_s)),
        asyncio.create_task(gateway.admit_queued()),
    ]
    if gateway.service:
        watch = discovery.watch(gateway.backends, gateway.service, gateway.dns, settings.resolve_interval_s)
        tasks.append(asyncio.create_task(watch))
    if settings.admission_load and settings.fleet_metrics_port:
        tasks.append(asyncio.create_task(fleet.watch(gateway.backends, settings.fleet_metrics_port)))
    yield
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await gateway.backends.close()


async def close_websockets(app: web.Application) -> None:
    """Close each open WebSocket with 1001: its handler then stops its streams and returns,
    which aiohttp's shutdown waits for."""
    for ws in set(app[WEBSOCKETS]):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutting down")


def serving(settings: Settings) -> Awaitable[None]:
    """The gateway, or its workers (--gateway-workers), until cancelled."""
    return serve_workers(settings) if settings.gateway_workers > 1 else serve_forever(settings)


async def serve_forever(settings: Settings, worker: Worker | None = None) -> None:
    """Serve until cancelled; then drain (new streams refused, /readyz 503, the streams
    being spoken given up to `drain_s` to end) and shut down as aiohttp does: stop
    listening, close the WebSockets, wait for handlers, stop the background tasks. A
    worker shares the port and answers for itself on its loopback port too."""
    gateway = Gateway(settings, worker)
    # aiohttp's keepalive timeout runs from the connection's start until a request's head
    # is read, and between requests: the bound on slow and silent clients.
    runner = web.AppRunner(application(gateway), access_log=None, keepalive_timeout=settings.header_timeout_s,
                           shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    raise_open_file_limit(settings.max_connections)
    server_socket = await open_server(runner.server, settings, reuse_port=worker is not None)
    own = await answer_for_itself(gateway, worker) if worker else None
    # What startup made (mostly the modules) lives as long as the process: out of the
    # collector's reach, it no longer lengthens a full collection, which pauses every
    # stream (docs/design.md, Audio out).
    gc.freeze()
    try:
        tritons = f"the A records of {gateway.service}" if gateway.service else ", ".join(settings.triton_urls)
        which = f"worker {worker.index} (pid {os.getpid()})" if worker else "gateway"
        log.info("%s on http://%s:%d (WebSocket %s), Triton at %s", which, settings.host, settings.port,
                 v1.PROTOCOL_PATH, tritons)
        await asyncio.Event().wait()
    finally:
        await gateway.drain(settings.drain_s)
        log.info("gateway stopping: closing %d WebSockets", sum(not ws.closed for ws in runner.app[WEBSOCKETS]))
        server_socket.close()
        if own:
            await own.cleanup()
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
    # SIGUSR1 writes every thread's stack to stderr, even with the event loop stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if WORKER_ENV in os.environ:  # one of several, started by serve_workers
        worker, settings = from_environment(os.environ[WORKER_ENV])
        gateway = serve_forever(settings, worker)
    else:
        gateway = serving(s.from_arguments(args))
    try:
        asyncio.run(until_signalled(gateway))
    except (VoiceError, discovery.BadAddress) as e:
        log.error("%s", e)
        raise SystemExit(2) from None


async def until_signalled(serving: Awaitable[None]) -> None:
    """Run `serving` until SIGTERM or SIGINT, which cancel it (and so shut it down)."""
    task = asyncio.ensure_future(serving)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda sig=sig: (log.info("received %s", sig.name), task.cancel()))
    with contextlib.suppress(asyncio.CancelledError):
        await task


if __name__ == "__main__":
    main()
