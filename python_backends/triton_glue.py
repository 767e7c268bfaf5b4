"""What the three Triton models share: declaring tensors, reading requests, sending
responses. Imported only inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from .contract import DECOUPLED_MODELS, model_inputs, model_outputs

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def log_error(message: str) -> None:
    pb_utils.Logger.log_error(message)  # looked up per call: absent during auto-complete


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


def run_by_key(keys: Sequence[Hashable], run: Callable[[Hashable, list[int]], Any]) -> list:
    """What a batched model answers each request of a batch with: `run(key, indices)`
    once per distinct key (requests that can share one call), its rows (of a numpy array
    or torch tensor) handed back to those requests in order; None for the requests of a
    key `run` answered None for."""
    rows: list = [None] * len(keys)
    for key in dict.fromkeys(keys):
        same = [i for i, k in enumerate(keys) if k == key]
        if (out := run(key, same)) is not None:
            for row, i in enumerate(same):
                rows[i] = out[row : row + 1]
    return rows


def response(outputs: dict[str, np.ndarray]):
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in outputs.items()])


def error(message: str):
    """A response that is an error the client sees as is."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))


def send_error(sender, message: str) -> None:
    """Finish a decoupled request with an error the client sees as is."""
    sender.send(error(message), flags=FINAL)


def gauge(name: str, description: str):
    """A gauge on Triton's metrics endpoint (the Python backend's custom metrics)."""
    family = pb_utils.MetricFamily(name=name, description=description, kind=pb_utils.MetricFamily.GAUGE)
    return family, family.Metric(labels={})


def counter(name: str, description: str):
    """A counter on Triton's metrics endpoint."""
    family = pb_utils.MetricFamily(name=name, description=description, kind=pb_utils.MetricFamily.COUNTER)
    return family, family.Metric(labels={})
