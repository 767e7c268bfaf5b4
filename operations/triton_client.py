"""A small synchronous gRPC client for the Triton models (tests, benchmarks, examples)."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from contract.models import CAPACITY


def make_inputs(values: dict[str, object]) -> list[grpcclient.InferInput]:
    """InferInputs from plain values: str becomes BYTES [1], numbers keep their dtype."""
    inputs = []
    for name, value in values.items():
        array = np.array([value.encode()], dtype=object) if isinstance(value, str) else np.asarray(value)
        if array.ndim == 0:
            array = array.reshape(1)
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


@dataclass
class Response:
    seconds: float  # since the request was sent
    result: grpcclient.InferResult | None
    final: bool

    def get(self, name: str) -> np.ndarray | None:
        return None if self.result is None else self.result.as_numpy(name)


class StreamError(Exception):
    pass


class Stream:
    """One gRPC stream: send a request, read its responses as they arrive."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self._queue: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self._queue.put((time.perf_counter(), result, error)))
        self._sent = 0.0

    def send(self, model: str, values: dict[str, object]) -> None:
        self._sent = time.perf_counter()
        self.client.async_stream_infer(model, make_inputs(values), enable_empty_final_response=True)

    def next(self, timeout: float = 60) -> Response:
        t, result, error = self._queue.get(timeout=timeout)
        if error is not None:
            raise StreamError(str(error))
        final = result.get_response().parameters["triton_final_response"].bool_param
        return Response(t - self._sent, result, final)

    def responses(self, timeout: float = 60) -> list[Response]:
        """Every response with outputs up to the final one, but a BLS model's capacity."""
        out = []
        while True:
            r = self.next(timeout)
            if {o.name for o in r.result.get_response().outputs} - {CAPACITY}:  # not the capacity said last
                out.append(r)
            if r.final:
                return out

    def cancel(self) -> None:
        self.client.stop_stream(cancel_requests=True)

    def close(self, cancel: bool = False) -> None:
        """End the stream once its requests have ended, or with `cancel`, at once,
        cancelling them: a stream given up on (an error, a timeout) must not wait for a
        model that may never answer."""
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def stream(url: str, model: str, values: dict[str, object]) -> list[Response]:
    s = Stream(url)
    try:
        s.send(model, values)
        responses = s.responses()
    except BaseException:
        s.close(cancel=True)
        raise
    s.close()
    return responses


def infer(url: str, model: str, values: dict[str, object]) -> grpcclient.InferResult:
    with grpcclient.InferenceServerClient(url) as client:
        return client.infer(model, make_inputs(values))


def inference_count(url: str, model: str) -> int:
    """Inferences `model` has run, from Triton's statistics."""
    with grpcclient.InferenceServerClient(url) as client:
        return client.get_inference_statistics(model).model_stats[0].inference_count


__all__ = ["InferenceServerException", "Response", "Stream", "StreamError", "infer", "inference_count", "make_inputs", "stream"]
