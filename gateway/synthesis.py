"""The gateway's only code that talks to Triton: a `tts` request over a gRPC stream, and
its failures turned into the protocol's errors, once, for WebSocket and HTTP alike.

A request goes to the Triton server with the least outstanding work among those up
(backends.Backends). Triton unreachable is `backend_unavailable` (the server is marked
down at once); Triton refusing or failing the request is `synthesis_failed`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from python_backends import contract as c

from .backends import Backends

log = logging.getLogger("speechstream.gateway")


class SynthesisFailed(Exception):
    """A request that ended without its audio; `code` is protocol v1's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class TtsChunk:
    pcm: np.ndarray  # float32 at the voice's rate
    sentence_index: int  # which of the request's sentences it speaks
    words: list[tuple[str, int, int]]  # (word, start, end sample of this request's audio)


_PARAM_TYPES = {p.name: triton_to_np_dtype(p.triton_type.removeprefix("TYPE_")) for p in c.VOICE_PARAMS + c.CHUNK_PARAMS}


def _input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def tts_request(sentences: Sequence[str], params: tuple[tuple[str, float | int], ...] = ()) -> dict:
    """A `tts` request for sentences already cut; `params` are (tensor name, value) pairs."""
    inputs = [_input(c.SENTENCES, np.array([s.encode() for s in sentences], dtype=object))]
    inputs += [_input(name, np.array([value], dtype=_PARAM_TYPES[name])) for name, value in params]
    return {"model_name": c.TTS_MODEL, "inputs": inputs, "parameters": {"triton_enable_empty_final_response": True}}


async def _stream(
    client: grpcclient.InferenceServerClient, request: dict, first_response: Callable[[float], None]
) -> AsyncIterator[TtsChunk]:
    """One request on a gRPC stream of its own. Leaving early cancels the call, which
    makes Triton cancel the request."""
    sent = asyncio.Event()  # the request iterator stays open until the call ends

    async def requests():
        yield request
        await sent.wait()

    call = client.stream_infer(requests())
    start = time.monotonic()
    try:
        async for result, error in call:
            if start is not None:
                first_response(time.monotonic() - start)
                start = None
            if error is not None:
                raise SynthesisFailed(c.SYNTHESIS_FAILED, error.message())
            if (pcm := result.as_numpy(c.PCM)) is not None:
                names, spans = result.as_numpy(c.WORDS), result.as_numpy(c.WORD_SAMPLES)
                words = [] if names is None else [(w.decode(), int(a), int(b)) for w, (a, b) in zip(names, spans)]
                yield TtsChunk(pcm, int(result.as_numpy(c.SENTENCE_INDEX)[0]), words)
            if result.get_response().parameters["triton_final_response"].bool_param:
                return
        raise ConnectionError("Triton closed the stream")
    finally:
        sent.set()
        call.cancel()


class Synthesizer:
    """Streams `tts` requests from the least loaded Triton server that is up."""

    def __init__(self, backends: Backends, first_response: Callable[[float], None] = lambda _: None) -> None:
        self.backends = backends
        self._first_response = first_response  # told each request's seconds to its first response

    async def synthesize(
        self, sentences: Sequence[str], params: tuple[tuple[str, float | int], ...] = ()
    ) -> AsyncIterator[TtsChunk]:
        """The audio of `sentences`, chunk by chunk; SynthesisFailed if it cannot come."""
        backend = self.backends.acquire()
        try:
            async for chunk in _stream(backend.client, tts_request(sentences, params), self._first_response):
                yield chunk
        except SynthesisFailed as e:
            log.warning("Triton %s failed a request: %s", backend.url, e.message)
            raise
        except (grpc.aio.AioRpcError, ConnectionError, OSError) as e:
            why = f"{e.code().name}: {e.details()}" if isinstance(e, grpc.aio.AioRpcError) else str(e)
            backend.mark(False, why.splitlines()[0] if why else type(e).__name__)
            raise SynthesisFailed(c.BACKEND_UNAVAILABLE, f"Triton unavailable: {why}") from None
        finally:
            self.backends.release(backend)
