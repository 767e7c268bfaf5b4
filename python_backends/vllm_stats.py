"""vLLM's own counts of an engine (its scheduler's reports), kept as an EngineStats for
Triton's metrics port. Runs in the vLLM environment."""

from __future__ import annotations

from collections.abc import Callable

from vllm.v1.metrics.loggers import StatLoggerBase

from python_backends.engine_stats import EngineStats


class StatsLogger(StatLoggerBase):
    """Keeps an EngineStats from vLLM's reports and hands it on (to Triton's metrics)."""

    def __init__(self, vllm_config, engine_index: int = 0, *, stats: EngineStats,
                 on_stats: Callable[[EngineStats], None]) -> None:
        self.stats, self.on_stats = stats, on_stats

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
        if scheduler_stats is not None:
            self.stats.running, self.stats.waiting = scheduler_stats.num_running_reqs, scheduler_stats.num_waiting_reqs
            self.stats.peak_running = max(self.stats.peak_running, self.stats.running)
        if iteration_stats is not None:
            self.stats.generated_tokens += iteration_stats.num_generation_tokens
        self.on_stats(self.stats)

    def log_engine_initialized(self) -> None:
        pass
