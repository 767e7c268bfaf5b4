"""`speechstream-triton`: run Triton Inference Server on the model repository, without Docker.

The `nvidia-pytriton` wheel carries a real `tritonserver` and the Python backend. This
assembles a backend directory from it (with the stub built for this Python), derives
the voice's stage graphs into the cache, starts the server with this environment's
packages on the stub's path, waits until it is ready, restarts it when it exits or a
stub dies, and stops it cleanly on SIGINT or SIGTERM, leaving no stub or shared memory
behind.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from contract.voices import VoiceError
from operations.arguments import add_gpu_argument, add_listen_flag, add_voices_argument
from operations.environment import MODEL_REPOSITORY
from operations.process_tree import adopt_orphans
from operations.supervisor import TritonServer

log = logging.getLogger("speechstream.triton")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="speechstream-triton", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("TRITON_HOST", "127.0.0.1"), help="address to bind (env TRITON_HOST)")
    parser.add_argument("--http-port", type=int, default=int(os.environ.get("TRITON_HTTP_PORT", 8000)), help="env TRITON_HTTP_PORT")
    parser.add_argument("--grpc-port", type=int, default=int(os.environ.get("TRITON_GRPC_PORT", 8001)), help="env TRITON_GRPC_PORT")
    parser.add_argument("--metrics-port", type=int, default=int(os.environ.get("TRITON_METRICS_PORT", 8002)), help="env TRITON_METRICS_PORT")
    parser.add_argument("--model-repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument("--log-verbose", type=int, default=0)
    add_voices_argument(parser)
    add_gpu_argument(parser)
    add_listen_flag(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    server = TritonServer(
        args.http_port, args.grpc_port, args.metrics_port, args.host, args.model_repository, args.log_verbose, args.voices,
        args.ar_model, args.chat_model, args.gpu, args.listen,
    )
    adopt_orphans()
    stopping = threading.Event()

    def stop(signum, _frame):
        log.info("received %s; stopping tritonserver", signal.Signals(signum).name)
        stopping.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        server.start()
    except VoiceError as e:
        log.error("%s", e)
        return 2
    try:
        server.wait_ready()
    except (RuntimeError, TimeoutError) as e:
        log.error("%s", e)
        server.stop()
        return 1
    log.info("ready: gRPC %s:%d, HTTP %s:%d, metrics %s:%d", args.host, args.grpc_port, args.host, args.http_port, args.host, args.metrics_port)
    server.supervise(stopping)  # Triton drains in-flight requests (up to 30 s) as it stops
    return server.stop().exit_code


if __name__ == "__main__":
    sys.exit(main())
