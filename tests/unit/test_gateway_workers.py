"""The parts of gateway workers (gateway/edge/workers.py) that need no process: what a worker
is told by its parent, and the one exposition made of every worker's metrics."""

import dataclasses

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.edge.metrics import merged
from gateway.edge.workers import Worker, from_environment, worker_environment
from gateway.settings import Settings


def exposition(connections: int, audio_s: float, first_audio_s: float) -> str:
    registry = CollectorRegistry()
    Gauge("speechstream_connections", "Open WebSocket connections", registry=registry).set(connections)
    Counter("speechstream_audio_seconds", "Audio sent", registry=registry).inc(audio_s)
    Histogram("speechstream_ttfp_seconds", "First audio", buckets=(0.05, 0.1), registry=registry).observe(first_audio_s)
    return generate_latest(registry).decode()


def test_every_workers_samples_under_one_family_each_labelled_with_its_worker():
    text = merged({0: exposition(3, 10.0, 0.04), 1: exposition(5, 2.5, 0.2)}).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [line for line in text.splitlines() if line.startswith("# TYPE speechstream_connections")] == [
        "# TYPE speechstream_connections gauge"]  # one HELP and TYPE a family, as Prometheus requires
    assert {s.labels["worker"]: s.value for s in families["speechstream_connections"].samples} == {"0": 3, "1": 5}
    totals = {s.labels["worker"]: s.value for s in families["speechstream_audio_seconds"].samples
              if s.name == "speechstream_audio_seconds_total"}
    assert totals == {"0": 10.0, "1": 2.5} and families["speechstream_audio_seconds"].type == "counter"
    buckets = {(s.labels["worker"], s.labels["le"]): s.value for s in families["speechstream_ttfp_seconds"].samples
               if s.name.endswith("_bucket")}
    assert buckets[("0", "0.05")] == 1 and buckets[("1", "0.05")] == 0 and buckets[("1", "+Inf")] == 1


def test_a_worker_is_told_its_place_and_its_share_of_the_connections():
    settings = Settings(triton_urls=("127.0.0.1:8001", "10.0.0.2:8001"), gateway_workers=3, max_connections=1000,
                        allowed_origins=("https://a.example",), api_key="secret")
    worker, told = from_environment(worker_environment(Worker(2, (4001, 4002, 4003)), settings))
    assert worker == Worker(2, (4001, 4002, 4003)) and worker.port == 4003 and worker.siblings == {0: 4001, 1: 4002}
    assert told == dataclasses.replace(settings, max_connections=334)  # tuples stay tuples; the key goes along
    uncapped = Settings(max_connections=0, gateway_workers=2)
    assert from_environment(worker_environment(Worker(0, (1, 2)), uncapped))[1].max_connections == 0
