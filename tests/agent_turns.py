"""What the voice-agent framework drivers (tests/pipecat_driver.py, tests/livekit_driver.py)
and perf/frameworks/agents.py share: an LLM's reply as it streams, and the gateway's metrics.
Standard library only: the drivers run in the frameworks' environment (.venv-agents)."""

from __future__ import annotations

import re
import urllib.request


def deltas(text: str) -> list[str]:
    """The text as an LLM streams it: pieces of up to 4 characters (about a token), spaces
    leading; the trailing space too, so that the pieces join into the text."""
    return re.findall(r"\s*\S{1,4}", text) + ([tail] if (tail := text[len(text.rstrip()):]) else [])


def gateway_metrics(url: str) -> dict[str, float]:
    """The gateway's Prometheus samples, each summed over its labels, from the /metrics of
    the gateway at protocol-v1 `url` (ws://HOST:PORT/v1/stream)."""
    http = url.replace("ws://", "http://").replace("wss://", "https://").rsplit("/v1/", 1)[0]
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    totals: dict[str, float] = {}
    for line in lines:
        if line and not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals
