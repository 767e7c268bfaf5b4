"""An engine's counts of its batch, kept for Triton's metrics port: what the Talker and
the Thinker share, whatever their engine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineStats:
    running: int = 0  # requests in the batch
    waiting: int = 0  # requests waiting for a place in it
    generated_tokens: int = 0  # tokens written since the engine started
    peak_running: int = 0  # the most requests in one batch since the engine started
