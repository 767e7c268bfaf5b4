"""A stand-in for Triton that answers the gateway's `tts` streams from recorded responses
at once: a benchmark tool for the ceiling of the gateway alone (perf/gateway/ceiling.py),
never a product mode.

    python -m perf.gateway.replay --port P --record 127.0.0.1:8001 --file F   # proxy to a real Triton, recording
    python -m perf.gateway.replay --port P --file F                           # answer from F, at once

It speaks the part of Triton's gRPC service a gateway uses: ServerLive, ServerReady,
ModelReady, and ModelStreamInfer. Recording, each request goes to the real server and
its responses are kept by the request's inputs (the sentences, voice and parameters),
and written to F on SIGTERM; replaying, a request is answered with the responses
recorded for the same inputs, with its own id, as fast as gRPC takes them, and one
never recorded with an error.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as rpc

from contract import models as c

log = logging.getLogger("speechstream.replay")

Recording = dict[str, list[bytes]]  # a request's inputs' key → its responses, serialized


def key(request: pb.ModelInferRequest) -> str:
    """What makes two requests the same here: the model, the sentences and the voice (a
    seed the gateway draws for each stream makes no difference to the benchmark)."""
    h = hashlib.sha256(request.model_name.encode())
    for tensor, raw in zip(request.inputs, request.raw_input_contents):
        if tensor.name in (c.SENTENCES, c.VOICE):
            h.update(tensor.name.encode())
            h.update(raw)
    return h.hexdigest()


class Replay(rpc.GRPCInferenceServiceServicer):
    def __init__(self, recording: Recording, upstream: rpc.GRPCInferenceServiceStub | None) -> None:
        self.recording, self.upstream = recording, upstream

    async def ServerLive(self, request, context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=True)

    async def ModelStreamInfer(self, requests, context) -> AsyncIterator[pb.ModelStreamInferResponse]:
        async for request in requests:
            source = self._recorded(request) if self.upstream is None else self._recording(request)
            async for response in source:
                yield response

    async def _recorded(self, request: pb.ModelInferRequest) -> AsyncIterator[pb.ModelStreamInferResponse]:
        responses = self.recording.get(key(request))
        if responses is None:
            yield pb.ModelStreamInferResponse(error_message="perf.gateway.replay: no response recorded for this request")
            return
        for raw in responses:
            response = pb.ModelStreamInferResponse.FromString(raw)
            response.infer_response.id = request.id
            yield response

    async def _recording(self, request: pb.ModelInferRequest) -> AsyncIterator[pb.ModelStreamInferResponse]:
        kept: list[bytes] = []
        done = asyncio.Event()

        async def one():
            yield request
            await done.wait()  # half-close only once the final response is in, as the gateway does

        call = self.upstream.ModelStreamInfer(one())
        try:
            async for response in call:
                kept.append(response.SerializeToString())
                yield response
                if response.infer_response.parameters["triton_final_response"].bool_param:
                    break
        finally:
            done.set()
            call.cancel()
        self.recording[key(request)] = kept


def load(file: Path) -> Recording:
    return {k: [base64.b64decode(r) for r in v] for k, v in json.loads(file.read_text()).items()}


async def serve(port: int, file: Path, upstream_url: str | None) -> None:
    recording: Recording = {} if upstream_url else load(file)
    channel = grpc.aio.insecure_channel(upstream_url) if upstream_url else None
    server = grpc.aio.server()
    rpc.add_GRPCInferenceServiceServicer_to_server(
        Replay(recording, rpc.GRPCInferenceServiceStub(channel) if channel else None), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    log.info("replay on 127.0.0.1:%d: %s", port, f"recording {upstream_url}" if upstream_url else
             f"{len(recording)} requests from {file}")
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stopping.set)
    await stopping.wait()
    await server.stop(grace=1)
    if channel:
        await channel.close()
        file.write_text(json.dumps({k: [base64.b64encode(r).decode() for r in v] for k, v in recording.items()}))
        log.info("recorded %d requests into %s", len(recording), file)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m perf.gateway.replay", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--file", type=Path, required=True, help="the recording: written when recording, read otherwise")
    parser.add_argument("--record", metavar="HOST:PORT", help="a real Triton's gRPC address to record from")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(serve(args.port, args.file, args.record))


if __name__ == "__main__":
    main()
