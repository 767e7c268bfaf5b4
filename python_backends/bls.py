"""Requests from a BLS model to the other models of its Triton server, shared by both
families' BLS models. Imported only inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import asyncio
import collections
import os
import re
import signal
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils

from contract import models as c
from python_backends.failover import Failover, Lost
from python_backends.keepalive import KeepAlive
from python_backends.stubs import StubWatch, children

# The first of contract.models.STUB_FAULTS names the instance whose stub is dead or stopped.
UNHEALTHY = re.compile(r"Stub process '(?P<instance>[^']+)' is not healthy")
# How long a finished decoupled request's response iterator is held (Bls.decoupled): far
# past the stub's cleanup of it, which waits behind the stub's other messages to Triton.
ITERATOR_HOLD_S = 10.0


class Bls:
    """Decoupled and plain requests to the server's models, shared by all streams."""

    def __init__(self, waiters: int) -> None:
        # The BLS response iterator blocks; each decoupled request parks a thread on it.
        self._waiters = ThreadPoolExecutor(waiters, thread_name_prefix="stream-wait")
        self._stubs = StubWatch(lambda: children(os.getppid()))  # the stubs of this stub's tritonserver
        self._failover: dict[str, Failover] = {}  # by stateless model
        self._finished = KeepAlive(ITERATOR_HOLD_S)

    async def decoupled(self, model: str, inputs: list, outputs: list[str]) -> AsyncIterator:
        """A decoupled request's responses, but the empty final one; a response that is
        an error raises StageError. The response iterator is read to its end even when
        the reading stops early (a failure, the reader cancelled): one dropped unread
        deadlocks the 2.51 stub when the model unloads. The iterator, which holds every
        response it gave, is then held a while (ITERATOR_HOLD_S): the 2.51 stub drops its
        own reference to it on a thread of its own without the GIL (Stub::SendCleanupId),
        and if that reference were the last, the responses' numpy arrays would be freed
        there, corrupting the heap (python_backend#390 takes the GIL there, from r24.12)."""
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
            try:
                if not read_all:
                    await loop.run_in_executor(self._waiters, collections.deque, responses, 0)  # read to the end
            finally:
                self._finished.keep(responses)

    async def infer(self, model: str, inputs: list, output: str, frames: int, label: str) -> np.ndarray:
        """The one output of a call to a stateless model (vocoder, Code2Wav) on a window of
        `frames`. A call lost with its instance (its stub dead, stopped or hung) is issued
        again with the same inputs, and Triton gives it to an instance that is free
        (failover.Failover); the model being deterministic, the answer is the same. The
        model's own errors (a bad input), and a call lost at every attempt, raise StageError."""

        if (failover := self._failover.get(model)) is None:  # made once per model, not per call
            failover = self._failover[model] = Failover(faulty=lambda: self._stubs.faulty(model))

        def retried(why: Lost, attempt: int) -> None:
            pb_utils.Logger.log_warn(f"{model}: a window of request {label} was lost ({why}); "
                                     f"issuing it again, attempt {attempt} of {failover.attempts}")

        self._stubs.learn()
        try:
            return await failover.call(lambda: self._infer_once(model, inputs, output), frames, retried)
        except Lost as lost:
            raise c.StageError(str(lost)) from None

    async def _infer_once(self, model: str, inputs: list, output: str) -> np.ndarray:
        request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=[output],
                                             preferred_memory=host_memory())
        r = await request.async_exec()
        if r.has_error():
            message = r.error().message()
            if any(fault in message for fault in c.STUB_FAULTS):
                fence(message)
                raise Lost(message)
            raise c.StageError(message)
        return pb_utils.get_output_tensor_by_name(r, output).as_numpy()

    def late_calls(self) -> int:
        """Calls given up on at their deadline whose answers have not come yet."""
        return sum(len(f.late) for f in self._failover.values())

    def close(self) -> None:
        if late := self.late_calls():
            pb_utils.Logger.log_warn(f"unloading with {late} stage calls given up on still unanswered")
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


def fence(message: str) -> None:
    """Kill the stub of the instance that Triton just declared unhealthy in `message`.
    A stub stopped for that long aborts tritonserver (2.51: a boost lock_exception in the
    Python backend) as soon as it runs a request again after it continues, so it must not
    continue; a dead one is left as it is. The model serves on its other instances."""
    if (named := UNHEALTHY.search(message)) is None:
        return
    for pid in sibling_stubs(named["instance"]):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        pb_utils.Logger.log_error(f"killed the stub of {named['instance']} (pid {pid}): Triton found it unhealthy, "
                                  "and it would abort tritonserver if it ran again")


def sibling_stubs(instance: str) -> list[int]:
    """The pids of the live stubs that run `instance`, children of this stub's tritonserver."""
    return [pid for pid, (state, args) in children(os.getppid()).items() if state != "Z" and instance in args]
