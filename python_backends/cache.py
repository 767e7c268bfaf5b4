"""Where the stages keep what they derive or fetch once (voice graphs, the converted chat
model, the turn detector, Triton's backend stub): $SPEECHSTREAM_CACHE, else
~/.cache/speechstream."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("SPEECHSTREAM_CACHE") or Path.home() / ".cache" / "speechstream")
