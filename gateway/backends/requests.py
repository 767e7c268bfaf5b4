"""A request to Triton, for every kind of backend work (synthesis, thinking,
recognition): on the least loaded server that is up (servers.Backends), one decoupled
request on a gRPC stream of its own, and its failures as protocol v1's errors.

Triton unreachable, or a stage whose process died under the request, is
`backend_unavailable` (an unreachable server is marked down at once); Triton refusing or
failing the request otherwise is the kind's own code (`synthesis_failed`,
`recognition_failed`). Each kind raises a failure of its own type, a BackendFailed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import np_to_triton_dtype

from contract import models as c
from gateway.backends.servers import Backend, Backends, NoBackend
from speechstream import protocol as v1

log = logging.getLogger("speechstream.gateway")


class BackendFailed(Exception):
    """A request that ended without its answer; `code` is protocol v1's error code. `gone`:
    its server or a stage went away (unreachable, a stub dead, no progress), so what it
    had not delivered may be issued again; by default, for `backend_unavailable`."""

    def __init__(self, code: str, message: str, gone: bool | None = None, served: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.gone = code == v1.BACKEND_UNAVAILABLE if gone is None else gone
        self.served = served  # False: no server was up to take it

    code: str  # the code of Triton refusing or failing a request of the kind (a class's own)


# How a call fails when Triton cannot be reached (or goes away mid-call).
UNREACHABLE = (grpc.aio.AioRpcError, ConnectionError, OSError)


def unreachable(error: Exception) -> str:
    """Why Triton could not be reached, in a line or more."""
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error) or type(error).__name__


STREAM_CLOSE_S = 1.0  # how long a finished stream may take to close before it is cancelled
def infer_input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


async def responses(backend: Backend, request: dict, progress_s: float, failure: type[BackendFailed]) -> AsyncIterator:
    """One decoupled request on a gRPC stream of its own, its responses (InferResult) up
    to the final one. Leaving early cancels the call, which makes Triton cancel the
    request. A response that takes more than `progress_s` after it was asked for fails
    the request: a stage that died or hangs must not hang the stream (the wait while
    the caller sends audio to a slow client does not count). Its failures are `failure`s."""
    sent = asyncio.Event()  # the request iterator stays open until the call ends

    async def requests():
        yield request
        await sent.wait()

    call = backend.triton.stream_infer(requests())
    replies = aiter(call)
    finished = False
    try:
        while True:
            try:
                result, error = await asyncio.wait_for(anext(replies), progress_s or None)
            except StopAsyncIteration:
                raise ConnectionError("Triton closed the stream") from None
            except asyncio.TimeoutError:  # not the builtin on Python 3.10
                raise failure(v1.SYNTHESIS_FAILED, f"Triton made no progress for {progress_s:g} s", gone=True) from None
            if error is not None:
                stage_lost = any(fault in error.message() for fault in c.STUB_FAULTS)
                raise failure(v1.BACKEND_UNAVAILABLE if stage_lost else failure.code, error.message())
            if result.get_response().parameters["triton_final_response"].bool_param:
                sent.set()
                finished = await _closed(replies)
                return
            yield result
    finally:
        sent.set()
        if not finished:
            call.cancel()


async def _closed(replies: AsyncIterator, timeout_s: float = STREAM_CLOSE_S) -> bool:
    """Whether Triton ended a stream whose request is done and half-closed, within
    `timeout_s`. Cancelling it at once instead, when the final response was in, left
    Triton 2.51 holding the model now and then: its unload then waited out the exit
    timeout."""
    try:
        await asyncio.wait_for(anext(replies), timeout_s)
    except StopAsyncIteration:
        return True
    except (asyncio.TimeoutError, *UNREACHABLE):
        pass
    return False


@contextlib.asynccontextmanager
async def on_backend(backends: Backends, failure: type[BackendFailed]) -> AsyncIterator[Backend]:
    """The least loaded Triton server that is up, for one request; its failures become
    `failure`s with protocol v1's code, and a server that cannot be reached is
    marked down. A failure to reach a server already known to be down, the only one left
    to try, is not `served`: no server was up for the request."""
    try:
        backend = backends.acquire()
    except NoBackend as e:
        raise failure(v1.BACKEND_UNAVAILABLE, str(e), served=False) from None
    was_up = backend.up
    try:
        yield backend
    except BackendFailed as e:
        log.warning("Triton %s failed a request: %s", backend.url, e.message)
        raise
    except UNREACHABLE as e:
        why = unreachable(e)
        backend.mark(False, why.splitlines()[0])
        raise failure(v1.BACKEND_UNAVAILABLE, f"Triton unavailable: {why}", served=was_up) from None
    finally:
        backends.release(backend)
