"""The gateway's connection to Triton: one gRPC stream per context to the `tts` model."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from python_backends import contract as c

_END = object()


class SynthesisError(Exception):
    """Triton refused or failed a request; the message is Triton's."""


class BackendUnavailable(Exception):
    """Triton cannot be reached."""


@dataclass(frozen=True)
class TtsChunk:
    pcm: np.ndarray  # float32 at the voice's rate
    sentence_index: int
    span: tuple[int, int]
    words: list[tuple[str, int, int]]  # (word, start, end sample of this request's audio)


# Reconnect within a second of Triton coming back: gRPC's default backoff grows to two
# minutes. (No keepalive pings: Triton's default policy answers them with GOAWAY.)
CHANNEL_ARGS = [
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def triton_client(url: str) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(url, channel_args=CHANNEL_ARGS)


def _input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def tts_request(text: str, request_id: str, params: tuple[tuple[str, float | int], ...] = ()) -> dict:
    """A `tts` request; `params` are (tensor name, value) pairs from the contract."""
    types = {p.name: triton_to_np_dtype(p.triton_type.removeprefix("TYPE_")) for p in c.VOICE_PARAMS + c.CHUNK_PARAMS}
    inputs = [_input(c.TEXT, np.array([text.encode()], dtype=object))]
    inputs += [_input(name, np.array([value], dtype=types[name])) for name, value in params]
    return {
        "model_name": c.TTS_MODEL,
        "inputs": inputs,
        "request_id": request_id,
        "parameters": {"triton_enable_empty_final_response": True},
    }


class TtsStream:
    """A gRPC stream to `tts` that carries one request at a time, in order.

    Closing the stream (or cancelling the task that reads it) cancels the gRPC call,
    which makes Triton cancel the request in flight.
    """

    def __init__(
        self, client: grpcclient.InferenceServerClient, first_response: Callable[[float], None] = lambda _: None
    ) -> None:
        self._first_response = first_response  # told each request's seconds to its first response
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._call = client.stream_infer(self._requests())
        self._responses = aiter(self._call)
        self._count = 0

    async def _requests(self):
        while (request := await self._outbox.get()) is not _END:
            yield request

    async def synthesize(self, text: str, params: tuple = ()) -> AsyncIterator[TtsChunk]:
        """Stream the audio of `text`, chunk by chunk, until its final response."""
        self._count += 1
        self._outbox.put_nowait(tts_request(text, str(self._count), params))
        sent = time.monotonic()
        while True:
            try:
                result, error = await anext(self._responses)
            except StopAsyncIteration:
                raise BackendUnavailable("Triton closed the stream") from None
            except grpc.aio.AioRpcError as e:
                raise BackendUnavailable(f"Triton unavailable: {e.code().name}: {e.details()}") from None
            except Exception as e:  # the channel failing in other ways
                raise BackendUnavailable(f"Triton unavailable: {e!r}") from None
            if sent is not None:
                self._first_response(time.monotonic() - sent)
                sent = None
            if error is not None:
                raise SynthesisError(error.message())
            pcm = result.as_numpy(c.PCM)
            if pcm is not None:
                names, spans = result.as_numpy(c.WORDS), result.as_numpy(c.WORD_SAMPLES)
                words = [] if names is None else [(w.decode(), int(a), int(b)) for w, (a, b) in zip(names, spans)]
                yield TtsChunk(pcm, int(result.as_numpy(c.SENTENCE_INDEX)[0]), tuple(result.as_numpy(c.TEXT_SPAN)), words)
            if result.get_response().parameters["triton_final_response"].bool_param:
                return

    def close(self) -> None:
        self._outbox.put_nowait(_END)
        self._call.cancel()
