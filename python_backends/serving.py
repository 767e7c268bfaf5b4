"""What every Triton-facing model shares: declaring tensors from the contract, reading
requests, serving a decoupled model (`DecoupledModel`), its responses sent in order, its
errors sent as the client should read them, or a batched one (`BatchedModel`), or one
served through an engine on an event loop of its own (`EngineModel`). Imported only
inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import queue
import threading
from collections.abc import Hashable
from contextlib import aclosing
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from contract.models import DECOUPLED_MODELS, InvalidRequest, StageError, model_inputs, model_outputs

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def log_error(message: str) -> None:
    pb_utils.Logger.log_error(message)  # looked up per call: absent during auto-complete


def log_info(message: str) -> None:
    pb_utils.Logger.log_info(message)


def declare(config, model: str):
    """Fill a model's auto-complete config with its tensors from the contract."""
    for tensor in model_inputs(model):
        config.add_input(tensor)
    for tensor in model_outputs(model):
        config.add_output(tensor)
    if model in DECOUPLED_MODELS:
        config.set_model_transaction_policy({"decoupled": True})
    return config


def parameters(args: dict) -> dict[str, str]:
    """The `parameters` of a model's config.pbtxt, as plain strings."""
    config = json.loads(args["model_config"])
    return {k: v["string_value"] for k, v in config.get("parameters", {}).items()}


def request_inputs(request, model: str) -> dict[str, np.ndarray]:
    """The inputs present in `request`, as numpy arrays."""
    arrays = {}
    for tensor in model_inputs(model):
        value = pb_utils.get_input_tensor_by_name(request, tensor["name"])
        if value is not None:
            arrays[tensor["name"]] = value.as_numpy()
    return arrays


def request_parameter(request, name: str, default: str = "") -> str:
    """A request parameter (Triton's request `parameters` map) as a string."""
    return str(json.loads(request.parameters() or "{}").get(name, default))


def response(outputs: dict[str, np.ndarray]):
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in outputs.items()])


def error(message: str):
    """A response that is an error the client sees as is."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))


def send(sender, outputs: dict[str, np.ndarray] | None = None, error_message: str | None = None) -> None:
    """One response of a decoupled request (`outputs`), or its end: the final flag,
    with an error the client sees as is, or with nothing."""
    if outputs is not None:
        sender.send(response(outputs))
    elif error_message is not None:
        sender.send(error(error_message), flags=FINAL)
    else:
        sender.send(flags=FINAL)


def gauge(name: str, description: str):
    """A gauge on Triton's metrics endpoint (the Python backend's custom metrics)."""
    family = pb_utils.MetricFamily(name=name, description=description, kind=pb_utils.MetricFamily.GAUGE)
    return family, family.Metric(labels={})


def counter(name: str, description: str):
    """A counter on Triton's metrics endpoint."""
    family = pb_utils.MetricFamily(name=name, description=description, kind=pb_utils.MetricFamily.COUNTER)
    return family, family.Metric(labels={})


class GaugeByLabel:
    """A gauge family with a series for each value of one label, made as the values come.
    The Python backend removes no series but with its family: one whose value is no
    longer used stays, at 0."""

    def __init__(self, name: str, description: str, label: str) -> None:
        self.family = pb_utils.MetricFamily(name=name, description=description, kind=pb_utils.MetricFamily.GAUGE)
        self.label = label
        self._series: dict[str, object] = {}  # value: its Metric

    def increment(self, value: str, delta: int) -> None:
        """Add `delta` to the series of `value` (none for an empty value)."""
        if not value:
            return
        if value not in self._series:
            self._series[value] = self.family.Metric(labels={self.label: value})
        self._series[value].increment(delta)

    def close(self) -> None:
        self._series.clear()  # the metrics go before their family
        del self.family


class DecoupledModel:
    """A decoupled Triton Python model: one stream of responses per request.

    A model subclasses it, names its `model` from the contract and writes `respond`, an
    async generator of output dicts for one request. Each request is served as a task;
    each output goes out as a response, and nothing more is asked of `respond` once
    Triton cancels the request. A request ends with the final flag, or with an error:
    InvalidRequest and StageError as their message (the client's to read), anything else
    logged and reported as the model's failure."""

    model: str

    @classmethod
    def auto_complete_config(cls, config):
        return declare(config, cls.model)

    async def execute(self, requests) -> None:
        await asyncio.gather(*(self.serve(request) for request in requests))

    def deliver(self, sender, outputs: dict[str, np.ndarray] | None = None, error_message: str | None = None) -> None:
        """How responses leave: at once (a model with a ResponseLoop hands them to it)."""
        send(sender, outputs, error_message)

    async def serve(self, request) -> None:
        sender = request.get_response_sender()
        try:
            async with aclosing(self.respond(request)) as responses:
                async for outputs in responses:
                    if request.is_cancelled():
                        break
                    self.deliver(sender, outputs)
            self.deliver(sender)
        except (InvalidRequest, StageError) as e:
            self.deliver(sender, error_message=str(e))
        except Exception as e:
            log_error(f"{self.model}: request failed: {e!r}")
            self.deliver(sender, error_message=f"{self.model} failed: {e}")


class BatchedModel:
    """A batched Triton Python model (not decoupled; Triton's dynamic batcher joins its
    requests): one response per request. The batcher joins requests that cannot share
    one engine call (windows of other lengths, or voices), so a batch is run once per
    key, the windows of a key stacked in one call.

    A subclass names its `model` from the contract and writes `window` (a request's
    input, with the key of the requests that may share its call), `run` (one call on the
    windows of a key: an array or tensor with a row for each, in order; None where it
    cannot serve that key) and `answer` (a request's response, from its key and its row,
    None where `run` answered None)."""

    model: str

    @classmethod
    def auto_complete_config(cls, config):
        return declare(config, cls.model)

    def execute(self, requests) -> list:
        keyed = [self.window(request) for request in requests]
        rows: list = [None] * len(keyed)
        for key in dict.fromkeys(key for key, _ in keyed):
            same = [i for i, (k, _) in enumerate(keyed) if k == key]
            if (out := self.run(key, [keyed[i][1] for i in same])) is not None:
                for row, i in enumerate(same):
                    rows[i] = out[row : row + 1]
        return [self.answer(key, row) for (key, _), row in zip(keyed, rows)]

    def window(self, request) -> tuple[Hashable, Any]:
        raise NotImplementedError

    def run(self, key: Hashable, windows: list) -> Any:
        raise NotImplementedError

    def answer(self, key: Hashable, row: Any):
        raise NotImplementedError


class ResponseLoop:
    """Sends responses from a thread of its own, in the order given, so that the loop
    that makes them (an engine's) never waits on Triton; `close` sends what is queued,
    then stops (Triton's vllm_backend does the same)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="responses", daemon=True)
        self._thread.start()

    def put(self, sender, outputs: dict[str, np.ndarray] | None = None, error_message: str | None = None) -> None:
        self._queue.put((sender, outputs, error_message))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            sender, outputs, error_message = item
            try:
                send(sender, outputs, error_message)
            except Exception as e:  # a request Triton has dropped; the others go on
                log_error(f"a response could not be sent: {e!r}")

    def close(self, timeout: float) -> None:
        self._queue.put(None)
        self._thread.join(timeout)


class EngineModel(DecoupledModel):
    """A decoupled model whose engine runs on an event loop thread of its own, as Triton's
    vllm_backend runs vLLM's: requests are handed to that loop, their responses leave
    through a ResponseLoop, so the engine's loop never waits on Triton, and `finalize`
    lets the requests in flight end before the engine stops. It assumes no engine in
    particular: vllm_serving.VllmModel adds what vLLM asks of it.

    A subclass writes `start_engine` (a coroutine, run on the loop, that returns the
    engine: anything with a `shutdown()`) and `respond`, and names in `gauges` the
    metrics (name, description) that `export` sets from its engine's stats, a dataclass
    whose fields are in the same order."""

    drain_s = 10.0  # the longest finalize waits for requests in flight
    gauges: tuple[tuple[str, str], ...] = ()

    def initialize(self, args) -> None:
        families = [gauge(name, about) for name, about in self.gauges]
        self.families = [family for family, _ in families]
        self.metrics = [metric for _, metric in families]
        self.in_flight = 0  # requests handed to the loop and not ended
        self.idle = threading.Condition()
        self.responses = ResponseLoop()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"{self.model}-loop", daemon=True)
        self.thread.start()
        self.engine = asyncio.run_coroutine_threadsafe(self.start_engine(parameters(args)), self.loop).result()

    async def start_engine(self, parameters: dict[str, str]):
        raise NotImplementedError

    def export(self, stats) -> None:
        """The engine's counts on Triton's metrics port."""
        for metric, value in zip(self.metrics, dataclasses.astuple(stats)):
            metric.set(value)

    def execute(self, requests) -> None:
        for request in requests:
            with self.idle:
                self.in_flight += 1
            asyncio.run_coroutine_threadsafe(self._serve_counted(request), self.loop)

    async def _serve_counted(self, request) -> None:
        try:
            await self.serve(request)
        finally:
            with self.idle:
                self.in_flight -= 1
                self.idle.notify_all()

    def deliver(self, sender, outputs=None, error_message=None) -> None:
        self.responses.put(sender, outputs, error_message)

    def finalize(self) -> None:
        with self.idle:
            if not self.idle.wait_for(lambda: self.in_flight == 0, timeout=self.drain_s):
                log_error(f"{self.model}: unloading with {self.in_flight} requests still in flight after {self.drain_s:g} s")
        self.engine.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.responses.close(timeout=10)
        del self.metrics  # metrics go before their families
        del self.families
