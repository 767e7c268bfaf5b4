"""GET /metrics (Prometheus text format) and GET /v1/voices on the running gateway."""

import asyncio
import json
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from contract.voices import EMBEDDED
from speechstream import protocol as v1
from speechstream.client import connection
from tests.recorder import Recorder


def http(gateway: str) -> str:
    return gateway.replace("ws://", "http://").removesuffix(v1.PROTOCOL_PATH)


def scrape(gateway: str) -> dict[tuple[str, tuple], float]:
    """Every sample, keyed by name and sorted labels."""
    with urllib.request.urlopen(http(gateway) + "/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_counters_move_as_requests_are_served(gateway):
    before = scrape(gateway)

    async def run():
        async with connection(gateway) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await ws.send("{not json")
            await client.until("error")
            await client.send(type="text", context_id="open", text="Waiting for")
            await client.send(type="speak", context_id="c1", text="The birch canoe slid on the smooth planks.")
            done = await client.until("done", "c1")
            during = scrape(gateway)
            return done, during

    done, during = asyncio.run(run())
    after = scrape(gateway)
    assert value(during, "speechstream_connections") >= 1 and value(during, "speechstream_contexts") >= 1
    audio = value(after, "speechstream_audio_seconds_total") - value(before, "speechstream_audio_seconds_total")
    assert abs(audio - done["audio_ms"] / 1000) <= 0.02  # every frame counted, the padded last one too
    for name in ("speechstream_ttfp_seconds_count", "speechstream_triton_first_response_seconds_count"):
        assert value(after, name) - value(before, name) >= 1
    errors = "speechstream_errors_total"
    assert value(after, errors, code=v1.INVALID_JSON) - value(before, errors, code=v1.INVALID_JSON) == 1
    assert value(after, "speechstream_ttfp_seconds_sum") > value(before, "speechstream_ttfp_seconds_sum")


def test_voices(gateway):
    with urllib.request.urlopen(http(gateway) + "/v1/voices", timeout=5) as r:
        voices = json.loads(r.read())["voices"]
    assert voices[0] == {"id": EMBEDDED.name, "sample_rate": EMBEDDED.sample_rate, "language": "en_US",
                         "speakers": 1, "family": "piper", "word_timestamps": True}  # the default first
