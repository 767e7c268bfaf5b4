"""Requests from a BLS model to the other models of its Triton server, shared by both
families' BLS models. Imported only inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils

from contract import models as c


class Bls:
    """Decoupled and plain requests to the server's models, shared by all streams."""

    def __init__(self, waiters: int) -> None:
        # The BLS response iterator blocks; each decoupled request parks a thread on it.
        self._waiters = ThreadPoolExecutor(waiters, thread_name_prefix="stream-wait")

    async def stream(self, model: str, inputs: list, outputs: list[str]) -> AsyncIterator:
        """A decoupled request's responses, but the empty final one; a response that is
        an error raises StageError. The response iterator is read to its end even when
        the reading stops early (a failure, the reader cancelled): one dropped unread
        deadlocks the 2.51 stub when the model unloads."""
        request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs,
                                             preferred_memory=host_memory())
        responses = iter(await request.async_exec(decoupled=True))
        loop = asyncio.get_running_loop()
        read_all = False
        try:
            # The iterator blocks: each response is awaited in a waiter thread.
            while (r := await loop.run_in_executor(self._waiters, next, responses, None)) is not None:
                if r.has_error():
                    raise c.StageError(r.error().message())
                if pb_utils.get_output_tensor_by_name(r, outputs[0]) is not None:  # None: the empty final response
                    yield r
            read_all = True
        finally:
            if not read_all:
                await loop.run_in_executor(self._waiters, collections.deque, responses, 0)  # read to the end

    async def infer(self, model: str, inputs: list, output: str) -> np.ndarray:
        """A plain request's one output; an error raises StageError."""
        request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=[output],
                                             preferred_memory=host_memory())
        r = await request.async_exec()
        if r.has_error():
            raise c.StageError(r.error().message())
        return pb_utils.get_output_tensor_by_name(r, output).as_numpy()

    def close(self) -> None:
        self._waiters.shutdown(cancel_futures=True)


def host_memory():
    """Outputs come to the stub in host memory, as numpy reads them: a model on a GPU
    (Code2Wav on a GPU host) would otherwise answer with device memory, which as_numpy
    refuses. Its audio leaves the server over gRPC anyway: this is the one copy it needs.
    (Made when asked: the stub that reads a model's config has no PreferredMemory yet.)"""
    return pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)


def string_tensor(name: str, value: str, shape: tuple[int, ...] = (1,)):
    """A BYTES input holding one UTF-8 string."""
    return pb_utils.Tensor(name, np.array([value.encode()], dtype=object).reshape(shape))


def tensors(arrays: dict[str, np.ndarray]) -> list:
    """Named arrays as request inputs."""
    return [pb_utils.Tensor(name, value) for name, value in arrays.items()]
