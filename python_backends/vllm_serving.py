"""The models served from a vLLM engine (the Talker, the Thinker), Triton-facing:
serving.EngineModel with what vLLM asks of it, its engine processes started from the
engine's Python and the config's engine parameters read as engine arguments, and the
gauges of the counts vLLM's scheduler reports (vllm_stats.EngineStats). Imported only
inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import multiprocessing
import sys

from python_backends.serving import EngineModel


class VllmModel(EngineModel):
    """An EngineModel whose engine is vLLM's async engine (a subclass's `start_engine`
    passes it `engine_options`); its `gauges` begin with `engine_gauges`."""

    def initialize(self, args) -> None:
        multiprocessing.set_executable(sys.executable)  # vLLM's engine processes: the shim set it to the engine's Python
        super().initialize(args)

    @staticmethod
    def engine_options(parameters: dict[str, str]) -> dict:
        """The config's `dtype`, `max_model_len` and `enforce_eager` (true: no CUDA graphs), as engine arguments."""
        return {"dtype": parameters.get("dtype", "float32"), "max_model_len": int(parameters.get("max_model_len", "4096")),
                "eager": parameters.get("enforce_eager", "true") == "true"}


def engine_gauges(role: str, running: str, waiting: str, generated: str, peak: str,
                  tokens: str = "tokens") -> tuple[tuple[str, str], ...]:
    """The gauges of vllm_stats.EngineStats, in its fields' order, for the model that
    plays `role` (the Talker, the Thinker): the names of its metrics, and what they
    count (`tokens`: what the model's tokens are)."""
    return (
        (running, f"{role} requests in vLLM's batch"),
        (waiting, f"{role} requests waiting for a place in vLLM's batch"),
        (generated, f"{tokens} vLLM has written since the {role} started"),
        (peak, f"the most {role} requests vLLM has run in one batch since the {role} started"),
    )
