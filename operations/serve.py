"""`speechstream-serve`: Triton with the synthesis models, and the gateway in front of it.

Starts tritonserver (see `speechstream-triton`), waits until it is ready, then serves
protocol v1 on the gateway port, restarting Triton when it exits or one of its stubs
dies. SIGINT or SIGTERM stops both.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import threading

from contract.voices import VoiceError
from gateway import settings as s
from gateway.server import serving
from operations.arguments import add_chat_flag, add_gpu_argument
from operations.process_tree import adopt_orphans
from operations.supervisor import TritonServer

log = logging.getLogger("speechstream.serve")


async def run(args: argparse.Namespace) -> int:
    triton = TritonServer(args.triton_http_port, args.triton_grpc_port, args.triton_metrics_port, voices=args.voices,
                           ar_model=args.ar_model, chat_model=args.chat_model, gpu=args.gpu, listen=args.listen)
    adopt_orphans()
    triton.start()
    stopping = threading.Event()
    supervisor = None
    try:
        await asyncio.to_thread(triton.wait_ready)
        gateway = asyncio.create_task(
            serving(s.from_arguments(args, triton_urls=(f"127.0.0.1:{args.triton_grpc_port}",),
                                             fleet_metrics_port=args.triton_metrics_port,
                                             listen=args.listen or bool(args.chat_model)))  # a voice chat needs ears
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda sig=sig: (log.info("received %s", sig.name), stopping.set()))
        # Restarts Triton when it exits or a stub dies; returns once stopping is set.
        supervisor = asyncio.create_task(asyncio.to_thread(triton.supervise, stopping))
        done, _ = await asyncio.wait([gateway, supervisor], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if not stopping.is_set() and task.exception():
                log.error("stopping: %r", task.exception())
        log.info("stopping")
        gateway.cancel()
        await asyncio.wait([gateway])  # its WebSockets closed before Triton stops
        return 0
    finally:
        stopping.set()
        if supervisor is not None:
            await supervisor  # a restart under way finishes before the stop
        await asyncio.to_thread(triton.stop)


def main(argv: list[str] | None = None) -> int:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="speechstream-serve", description=__doc__.splitlines()[0])
    s.add_arguments(parser, skip=("triton_urls", "triton_service", "dns", "resolve_interval_s", "fleet_metrics_port"))
    parser.add_argument("--triton-http-port", type=int, default=int(env("TRITON_HTTP_PORT", 8000)))
    parser.add_argument("--triton-grpc-port", type=int, default=int(env("TRITON_GRPC_PORT", 8001)))
    parser.add_argument("--triton-metrics-port", type=int, default=int(env("TRITON_METRICS_PORT", 8002)))
    add_gpu_argument(parser)
    add_chat_flag(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return asyncio.run(run(args))
    except VoiceError as e:
        log.error("%s", e)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
