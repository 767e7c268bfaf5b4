"""A benchmark's results, written where it was asked: its JSON, its Markdown report and
its plot, under one name, and the report printed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path


def save(out: Path, name: str, results: dict, report: str, plot: Callable[[dict, Path], None]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2))
    (out / f"{name}.md").write_text(report + "\n")
    plot(results, out / f"{name}.png")
    print(report)
