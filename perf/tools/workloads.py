"""The benchmark and test texts, built from the Harvard sentences (public domain).

"short" is one sentence, "paragraph" eight consecutive ones, "long" all of them.
"""

from __future__ import annotations

from pathlib import Path

HARVARD = Path(__file__).parents[1] / "data" / "harvard.txt"


def harvard_sentences() -> list[str]:
    lines = HARVARD.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def workload(name: str) -> str:
    sentences = harvard_sentences()
    counts = {"short": 1, "paragraph": 8, "long": len(sentences)}
    return " ".join(sentences[: counts[name]])


WORKLOADS = ("short", "paragraph", "long")
