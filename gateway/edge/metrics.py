"""The gateway's Prometheus metrics, served at GET /metrics.

Gauges of what is open are read from the live sessions when scraped, and those of each
Triton server from the servers known then (a pod found in DNS comes, one drained goes);
counters and histograms are updated where the events happen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from gateway.backends.servers import Backend, Backends

# Seconds; the goals are tens of milliseconds at the client, so most buckets sit there.
LATENCY_BUCKETS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0)


class Metrics:
    def __init__(
        self, connections: Callable[[], int], contexts: Callable[[], int], speaking: Callable[[], int],
        backends: Backends, realtime: Callable[[], int] = lambda: 0,
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        Gauge("speechstream_connections", "Open WebSocket connections", registry=r).set_function(connections)
        Gauge("speechstream_realtime_sessions", "Open Realtime API sessions (of speechstream_connections)",
              registry=r).set_function(realtime)
        Gauge("speechstream_contexts", "Open contexts, on all connections", registry=r).set_function(contexts)
        Gauge("speechstream_active_streams", "Contexts with text being spoken now", registry=r).set_function(speaking)
        self._ttfp = Histogram(
            "speechstream_ttfp_seconds",
            "From text ready for an idle context (speak, a completed sentence, flush) to its first audio frame sent;"
            " for POST /v1/audio/speech, from the request read to the first body bytes",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self._triton_first_response = Histogram(
            "speechstream_triton_first_response_seconds", "From a tts request sent to Triton to its first audio",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self._resumptions = Counter(
            "speechstream_stream_resumptions",
            "Requests whose Triton or stage went away mid-stream, the sentences not yet delivered issued again "
            "(once per outage; those not resumed within --resume-within-s also count in speechstream_errors)",
            registry=r,
        )
        self._paused = Gauge(
            "speechstream_paused_streams",
            "Streams whose synthesis is paused, holding no compute, for a client that has not read their audio "
            "(more than --max-lead unread)", registry=r,
        )
        self._pauses = Counter("speechstream_stream_pauses", "Pauses of streams for a client that did not read",
                               registry=r)
        r.register(BackendGauges(backends))
        self._audio = Counter("speechstream_audio_seconds", "Audio sent to clients", registry=r)
        self._errors = Counter(
            "speechstream_errors", "Error messages sent, and HTTP speech requests refused or cut short, by code",
            ["code"], registry=r,
        )
        self._chat_turns = Counter(
            "speechstream_chat_turns", "Chat turns whose reply was decided, by the speculation's outcome", ["outcome"],
            registry=r,
        )
        self._chat_rounds = Counter(
            "speechstream_chat_rounds", "Speculative rounds that ended with a draft (one Thinker request each)",
            registry=r,
        )
        self._held_audio = Counter(
            "speechstream_chat_held_audio_seconds",
            "Audio of drafted first sentences synthesized before the question ended: released into a reply, or "
            "discarded (the draft changed or failed verification)", ["fate"], registry=r,
        )

    # What sessions and the speech endpoint report (contexts.Observer).

    def error(self, code: str) -> None:
        self._errors.labels(code).inc()

    def first_audio(self, seconds: float) -> None:
        self._ttfp.observe(seconds)

    def audio(self, seconds: float) -> None:
        self._audio.inc(seconds)

    def chat_turn(self, outcome: str) -> None:
        self._chat_turns.labels(outcome).inc()

    def chat_round(self) -> None:
        self._chat_rounds.inc()

    def held_audio(self, seconds: float, released: bool) -> None:
        self._held_audio.labels("released" if released else "discarded").inc(seconds)

    def triton_first_response(self, seconds: float) -> None:
        self._triton_first_response.observe(seconds)

    def resumed(self) -> None:
        self._resumptions.inc()

    def paused(self, change: int) -> None:
        """A stream paused (+1) or went on (-1)."""
        self._paused.inc(change)
        if change > 0:
            self._pauses.inc()

    def exposition(self) -> tuple[bytes, str]:
        """The text format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def merged(expositions: Mapping[int, str]) -> bytes:
    """Several gateway workers' metrics as one exposition, each sample labelled with its
    `worker` (workers.py): a family's samples from all of them under one HELP and TYPE."""
    families: dict[str, Metric] = {}
    for worker, text in expositions.items():
        for family in text_string_to_metric_families(text):
            into = families.setdefault(family.name, Metric(family.name, family.documentation, family.type, family.unit))
            into.samples += [s._replace(labels={**s.labels, "worker": str(worker)}) for s in family.samples]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Parsed(families.values()))
    return generate_latest(registry)


class _Parsed(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class BackendGauges(Collector):
    """Each Triton server's gauges, labelled by its URL, for the servers known when scraped."""

    GAUGES: tuple[tuple[str, str, Callable[[Backend], float]], ...] = (
        ("speechstream_triton_up", "1 while a Triton server is up", lambda b: float(b.up)),
        ("speechstream_triton_outstanding", "Contexts speaking through a Triton server", lambda b: b.outstanding),
        ("speechstream_triton_capacity_streams",
         "Real-time streams a Triton server sustains, as it measures them (0: not yet); admission's reference",
         lambda b: b.capacity),
        ("speechstream_triton_streams_elsewhere",
         "Streams a Triton server serves for other gateways, as its metrics said last; admission counts them",
         lambda b: b.elsewhere),
    )

    def __init__(self, backends: Backends) -> None:
        self.backends = backends

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, about, value in self.GAUGES:
            family = GaugeMetricFamily(name, about, labels=["url"])
            for backend in self.backends.all:
                family.add_metric([backend.url], value(backend))
            yield family
