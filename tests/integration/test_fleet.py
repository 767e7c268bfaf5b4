"""The fleet end to end on loopback, with real processes (issue 30): three tritonservers
as three pods of one headless Service (127.0.0.1, .2 and .3, the same ports; the third
listens on .4 behind a relay on .3 that can hold its answers), a real DNS server
(dnslib's) naming them, two gateways balancing over that name and admitting
together, and a real Prometheus scraping them all, evaluating the repository's recording
rules and the autoscaler's query. In order, on servers started once for the module:

- a Triton added to DNS takes streams only once its probe passed;
- one removed from DNS takes no new stream, and its streams end `done`, whole;
- admission across both gateways stays within the fleet's measured capacity, and
  Prometheus reports the demand the autoscaler scales on: streams ÷ capacity;
- a gateway's streams that Triton has synthesized to their ends, for a listener that
  reads nothing, hide none of the other gateway's from it;
- a gateway told to stop (SIGTERM) ends its streams `done` within its drain, refuses new
  ones, and the client library resumes a longer one on the other gateway."""

import asyncio
import contextlib
import json
import math
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from contract import models as c
from gateway.backends.servers import NOT_PROBED
from operations.loopback import free_ports, stop, wait_for_http
from operations.supervisor import TritonServer
from perf.tools.workloads import harvard_sentences, workload
from speechstream import protocol as v1
from speechstream.client import SpeechClient, connection
from tests.dns_server import dns_server
from tests.integration.test_discovery import (
    finish,
    hold,
    open_context,
    outstanding,
    per_server,
    readiness,
    wait_for,
    whole,
)
from tests.integration.test_kubernetes import MANIFESTS, kustomize, one
from tests.recorder import Recorder, holding_connection
from tests.relay import relaying
from tests.servers import Gateways, running

pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed (scripts/setup.sh --tests)"),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) renders the rules and the query"),
]

NAME = "triton.speechstream.svc.cluster.local"
PODS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
BEHIND_THE_RELAY = "127.0.0.4"  # where the third Triton listens
MAX_CONTEXTS = 16  # a connection's open contexts, the gateway's default (--max-contexts)
STREAMS = 10  # about what the gateways admit together over two servers (--admission-load is set by it)
DRAIN_S = 3
PROBING = f"cannot synthesize: {NOT_PROBED}"  # a server's readiness while up, its first probe under way
SLOW = 4.0  # length_scale: the slowest speech v1 takes, four times slower than the voice's own pace
ELSEWHERE = "speechstream_triton_streams_elsewhere"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Three Tritons (the first two in DNS; the third behind a relay), the DNS server, gateways `a` (drains
    DRAIN_S s) and `b` admitting about STREAMS over two servers as the Tritons measured
    themselves on a warm-up, and Prometheus; all stopped at the end."""
    root = tmp_path_factory.mktemp("fleet")
    http, grpc, metrics = free_ports(3)
    tritons = [TritonServer(http, grpc, metrics, host=host) for host in (*PODS[:2], BEHIND_THE_RELAY)]
    with contextlib.ExitStack() as stack:
        records, dns_port = stack.enter_context(dns_server())
        for i, triton in enumerate(tritons, 1):  # one after the other: started together, one may abort
            stack.enter_context(running(triton, dir_(root / f"triton{i}"), 300))
        relay = stack.enter_context(relaying((PODS[2], grpc), (BEHIND_THE_RELAY, grpc), http2=True))
        stack.enter_context(relaying((PODS[2], metrics), (BEHIND_THE_RELAY, metrics)))
        started = stack.enter_context(Gateways(root))  # the gateways stop before the Tritons

        def gateways_admitting(load: float, *names: str) -> dict:
            flags = ("--triton-service", f"{NAME}:{grpc}", "--dns", f"127.0.0.1:{dns_port}", "--resolve-interval", "0.3",
                     # A probe when a server comes up, then none during the test (a probe's
                     # stream would count among the streams Triton serves).
                     "--probe-interval", "600", "--admission-load", str(load), "--fleet-metrics-port", str(metrics),
                     # Admission by load alone: held streams read nothing, so all are ahead.
                     "--admission-slack", "0",
                     "--max-streams-per-client", "0", "--max-connections-per-client", "0", "--drain", str(DRAIN_S))
            return {name: started.start("", *flags, name=f"gateway-{name}") for name in names}

        # Each Triton measures its capacity on real work first: a paragraph each, through
        # a gateway (the probes' word alone says little).
        records.names = {NAME: list(PODS)}
        warming = gateways_admitting(0, "warm-up")["warm-up"]  # admitting all
        urls = [f"{host}:{grpc}" for host in PODS]
        wait_for(lambda: readiness(warming.port) == dict.fromkeys(urls, "ready"), "three ready", 60)
        asyncio.run(warm_up(warming.port, len(PODS)))
        measured = per_server(warming.port, "speechstream_triton_capacity_streams")
        stop(warming.process)
        assert all(measured[url] > 0 for url in urls), measured
        # The admission load at which two servers admit about STREAMS together: a limit of
        # STREAMS + 1, as the streams open, a new one included, stay within it.
        load = round((STREAMS + 1) / (2 * sum(measured.values()) / len(measured)), 3)
        records.names = {NAME: list(PODS[:2])}
        gateways = gateways_admitting(load, "a", "b")
        namespace, prometheus = stack.enter_context(prometheus_scraping(root, gateways.values(), metrics))
        yield Fleet(records, tritons, relay, gateways["a"], gateways["b"], prometheus, namespace, load)


async def warm_up(port: int, contexts: int) -> None:
    """A paragraph in each of `contexts` contexts at once (one to each server), spoken to the end."""
    client = Recorder(await connection(f"ws://127.0.0.1:{port}{v1.PROTOCOL_PATH}"))
    try:
        await client.until("ready")
        for i in range(contexts):
            await client.send(type="speak", context_id=f"w{i}", text=workload("paragraph"))
        ended = {}
        async with asyncio.timeout(120):
            while len(ended) < contexts:
                event = await client.read()
                if event.kind in ("done", "error"):
                    ended[event.context_id] = event.kind
        assert set(ended.values()) == {"done"}, ended
    finally:
        await client.ws.close()


def dir_(path):
    path.mkdir()
    return path


class Fleet:
    def __init__(self, records, tritons, relay, a, b, prometheus_port, namespace, load):
        self.load = load
        self.records, self.tritons, self.relay, self.a, self.b = records, tritons, relay, a, b
        self.prometheus, self.namespace = prometheus_port, namespace
        self.urls = [f"{host}:{tritons[0].grpc_port}" for host in PODS]

    def synthesizing(self) -> tuple[float, dict[str, float]]:
        """The `tts` requests the three Tritons synthesize now: in all, and by the gateway
        that sent them (the series there are)."""
        total, by_gateway = 0.0, {}
        for triton in self.tritons:
            with urllib.request.urlopen(f"http://{triton.host}:{triton.metrics_port}/metrics", timeout=5) as r:
                families = text_string_to_metric_families(r.read().decode())
            for family in families:
                for sample in family.samples:
                    if family.name == c.TTS_ACTIVE_METRIC:
                        total += sample.value
                    elif family.name == c.TTS_ACTIVE_BY_GATEWAY_METRIC:
                        gateway = sample.labels[c.GATEWAY_LABEL]
                        by_gateway[gateway] = by_gateway.get(gateway, 0.0) + sample.value
        return total, by_gateway

    def in_dns(self, *pods: int) -> None:
        """DNS names these pods (0, 1, 2) now; wait until both gateways have them ready
        and have forgotten the others."""
        self.records.names = {NAME: [PODS[i] for i in pods]}
        wanted = {self.urls[i]: "ready" for i in pods}
        for gateway in (self.a, self.b):
            wait_for(lambda: readiness(gateway.port) == wanted, f"{wanted} on {gateway.port}", 60)
            # Streams of an earlier test, cancelled, that Triton is still winding up count
            # for admission until it has.
            wait_for(lambda: set(per_server(gateway.port, ELSEWHERE).values()) <= {0},
                     "no stream left on the servers", 60)


@contextlib.contextmanager
def prometheus_scraping(root, gateways, triton_metrics_port):
    """A real Prometheus on a free loopback port, scraping the gateways' /metrics and the
    Tritons' metrics every second with the `namespace` label a PodMonitor gives, and
    evaluating the repository's PrometheusRule (its groups, every second) as a plain
    rules file. Yields the namespace and its port."""
    rendered = kustomize(MANIFESTS / "overlays" / "cpu")
    rule = one(rendered, "PrometheusRule")
    namespace = rule["metadata"]["namespace"]
    groups = rule["spec"]["groups"]
    for group in groups:
        group["interval"] = "1s"
    (root / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    relabel = [{"target_label": "namespace", "replacement": namespace}]  # as the PodMonitors' targets have it
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(root / "rules.yaml")],
        "scrape_configs": [
            {"job_name": "gateway", "relabel_configs": relabel,
             "static_configs": [{"targets": [f"127.0.0.1:{g.port}" for g in gateways]}]},
            {"job_name": "triton", "relabel_configs": relabel,
             "static_configs": [{"targets": [f"{host}:{triton_metrics_port}" for host in PODS]}]},
        ],
    }
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_ports(1)[0]
    with (root / "prometheus.log").open("w") as log:
        process = subprocess.Popen(
            ["prometheus", f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'prometheus'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT, cwd=root)
        try:
            wait_for_http(f"http://127.0.0.1:{port}/-/ready", process, 60, log.name)
            yield namespace, port
        finally:
            stop(process)


def autoscaler_query(name: str = "utilisation") -> dict:
    """The ScaledObject's prometheus trigger `name`'s metadata (query, threshold)."""
    scaled = one(kustomize(MANIFESTS / "overlays" / "cpu"), "ScaledObject")
    return next(t["metadata"] for t in scaled["spec"]["triggers"] if t["name"] == name)


def promql(port: int, query: str) -> list[dict]:
    """The instant vector Prometheus evaluates `query` to now."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as r:
        answer = json.load(r)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def scalar(port: int, query: str) -> float | None:
    result = promql(port, query)
    return float(result[0]["value"][1]) if result else None


def where_it_went(before: dict[str, float], after: dict[str, float]) -> list[str]:
    """The servers whose requests in flight grew."""
    return [url for url, n in after.items() if n > before.get(url, 0)]


def test_a_triton_added_to_dns_takes_streams_only_once_its_probe_passed(fleet):
    one_, two, three = fleet.urls
    fleet.in_dns(0, 1)
    port = fleet.a.port
    # The relay holding the third's answers holds its probe for as long as the test wants,
    # well within the stage timeout: a probe takes well under a second, which a slow
    # host's readiness reads can miss.

    async def opened_on(client: Recorder, context: str) -> tuple[str, list[str], str]:
        """(the third's state before, the server the stream went to, its state after)"""
        before = await asyncio.to_thread(readiness, port)
        counts = await asyncio.to_thread(outstanding, port)
        assert await open_context(client, context) == "admitted", context
        went = where_it_went(counts, await asyncio.to_thread(outstanding, port))
        return before[three], went, (await asyncio.to_thread(readiness, port))[three]

    async def run():
        ws, client = await hold(port, ["h0", "h1"])  # one stream held on each of the first two
        try:
            assert await asyncio.to_thread(outstanding, port) == {one_: 1, two: 1}
            fleet.relay.hold()
            try:
                fleet.records.names = {NAME: list(PODS)}
                await asyncio.to_thread(wait_for, lambda: readiness(port).get(three) == PROBING,
                                        "the third found in DNS, up, its probe under way", 10)
                early = [await opened_on(client, f"e{i}") for i in range(3)]  # admitted, all held
            finally:
                fleet.relay.release()
            # Waited for rather than polled with new streams: each would stay held, and
            # the fleet admits about STREAMS.
            await asyncio.to_thread(wait_for, lambda: readiness(port).get(three) == "ready", "the third's probe passed", 30)
            return early, await opened_on(client, "n")
        finally:
            await ws.close()  # cancels them

    early, later = asyncio.run(run())
    assert all(before == after == PROBING for before, _, after in early), early  # up, before its probe passed ...
    assert all(went != [three] for _, went, _ in early)  # ... all went elsewhere
    assert later == ("ready", [three], "ready")  # once ready it takes the next (the least busy)
    with open(fleet.a.log_path) as log:  # the gateway's word: found, up, then its probe passed
        said = [line.split(f"Triton {three} ")[1].split(":")[0].strip() for line in log if f"Triton {three} " in line]
    assert said == ["found in DNS", "is up", "synthesizes"]
    wait_for(lambda: set(outstanding(port).values()) == {0}, "the held streams cancelled")


def test_a_triton_removed_from_dns_takes_no_new_stream_and_its_streams_end_whole(fleet):
    one_, two, three = fleet.urls
    fleet.in_dns(0, 1, 2)

    async def run():
        held = await hold(fleet.a.port, ["c0", "c1", "c2"])  # one on each server
        spread = await asyncio.to_thread(outstanding, fleet.a.port)
        fleet.records.names = {NAME: [PODS[0], PODS[2]]}
        await asyncio.to_thread(wait_for, lambda: readiness(fleet.a.port)[two].startswith("draining: "),
                                "the second draining on a", 10)
        await asyncio.to_thread(wait_for, lambda: two not in readiness(fleet.b.port),
                                "the second forgotten by b, which had nothing on it", 10)
        later = await hold(fleet.b.port, ["n0", "n1"])
        during = await asyncio.to_thread(outstanding, fleet.b.port)
        return spread, during, await finish(*later, ["n0", "n1"]), await finish(*held, ["c0", "c1", "c2"]), held[1]

    spread, during, later_ends, held_ends, held = asyncio.run(run())
    assert spread == {one_: 1, two: 1, three: 1}
    assert during == {one_: 1, three: 1}  # the new streams went to the pods still in DNS
    assert [m["type"] for m in [*later_ends.values(), *held_ends.values()]] == ["done"] * 5  # none cut
    assert all(whole(held, c) for c in ("c0", "c1", "c2"))  # c1's was on the pod that left: every frame
    for gateway in (fleet.a, fleet.b):
        wait_for(lambda: set(readiness(gateway.port)) == {one_, three}, "the drained pod forgotten")


def fleet_capacity(fleet) -> dict[str, float]:
    """Each server's measured capacity (real-time streams) as the gateways heard it
    last: the larger of the two, as the recording rule takes it."""
    heard = [per_server(g.port, "speechstream_triton_capacity_streams") for g in (fleet.a, fleet.b)]
    return {url: max(h.get(url, 0.0) for h in heard) for url in heard[0] | heard[1]}


def test_admission_across_both_gateways_stays_within_the_fleets_capacity_and_prometheus_sees_the_demand(fleet):
    one_, two, three = fleet.urls
    fleet.in_dns(0, 2)
    capacity = fleet_capacity(fleet)
    assert capacity[one_] > 0 and capacity[three] > 0  # measured: by their probes and the streams that ended
    limit = math.ceil(fleet.load * sum(capacity.values()))
    trigger = autoscaler_query()

    async def run():
        clients: dict[str, list[Recorder]] = {"a": [], "b": []}  # each gateway's connections
        opened = {"a": 0, "b": 0}  # contexts opened on each gateway

        async def client_for(name: str, gateway) -> Recorder:
            """A connection with room for another context (one holds MAX_CONTEXTS at most:
            a fleet measured roomier takes more than one)."""
            if opened[name] // MAX_CONTEXTS == len(clients[name]):
                client = Recorder(await holding_connection(f"ws://127.0.0.1:{gateway.port}{v1.PROTOCOL_PATH}"))
                await client.until("ready")
                # The most bytes, held soonest; and slow speech, so that every request is still
                # being synthesized when the test ends: Triton synthesizes a request to its end
                # whatever its client reads, and the fleet counts the streams it synthesizes.
                await client.send(type="config", format="pcm_s16le", sample_rate=48000, length_scale=SLOW)
                await client.until("ready")
                clients[name].append(client)
            opened[name] += 1
            return clients[name][-1]

        try:
            outcomes = []  # (gateway, outcome), alternately
            for i in range(2 * limit + 8):
                if [outcome for _, outcome in outcomes[-4:]] == [v1.SERVER_BUSY] * 4:
                    break  # both full, twice each
                name = "ab"[i % 2]
                this, other = (fleet.a, fleet.b) if name == "a" else (fleet.b, fleet.a)
                outcomes.append((name, await open_context(await client_for(name, this), f"{name}{i}")))
                # The other gateway reads the servers' streams 4 times a second: once it has
                # read this one's, it counts them all elsewhere (all are being synthesized).
                await asyncio.to_thread(
                    wait_for, lambda: sum(per_server(other.port, ELSEWHERE).values()) == sum(outstanding(this.port).values()),
                    f"gateway {name}'s streams counted by the other", 10)
            held = sum(sum(outstanding(g.port).values()) for g in (fleet.a, fleet.b))
            # Prometheus: the recorded demand, as the autoscaler's query reads it, once it
            # has scraped the streams held now.
            expected = held / (sum(capacity.values()) / len(capacity))
            deadline = time.monotonic() + 30
            while (demand := scalar(fleet.prometheus, trigger["query"])) != pytest.approx(expected, rel=1e-3):
                assert time.monotonic() < deadline, f"the autoscaler's query says {demand}, not {expected}"
                await asyncio.sleep(0.5)
            targets = promql(fleet.prometheus, "up")
            streams = scalar(fleet.prometheus, f'namespace:speechstream_triton_streams:sum{{namespace="{fleet.namespace}"}}')
            utilisation = scalar(fleet.prometheus,
                                 f'namespace:speechstream_triton_utilisation:ratio{{namespace="{fleet.namespace}"}}')
            # No request ended meanwhile: admission went by the capacity read at the start.
            assert fleet_capacity(fleet) == capacity
            return outcomes, held, demand, streams, utilisation, targets
        finally:
            for client in (*clients["a"], *clients["b"]):
                await client.ws.close()

    outcomes, held, demand, streams, utilisation, targets = asyncio.run(run())
    # It scraped both gateways and the three Tritons, each labelled with the namespace.
    assert sorted((t["metric"]["job"], t["metric"]["namespace"], t["value"][1]) for t in targets) == \
        [("gateway", fleet.namespace, "1")] * 2 + [("triton", fleet.namespace, "1")] * 3
    admitted = [name for name, outcome in outcomes if outcome == "admitted"]
    assert {outcome for _, outcome in outcomes} == {"admitted", v1.SERVER_BUSY}
    assert streams == held  # Triton synthesizes every held stream: admission counts them all
    assert 1 <= len(admitted) == held <= limit  # both gateways together, within the fleet's share
    assert {"a", "b"} == {name for name, outcome in outcomes if outcome == v1.SERVER_BUSY}  # each refused, once full
    assert [outcome for _, outcome in outcomes[-4:]] == [v1.SERVER_BUSY] * 4  # and stay full
    assert demand > 0
    assert utilisation == pytest.approx(held / sum(capacity.values()), rel=1e-3)  # <= limit / capacity: admission held it
    wait_for(lambda: all(set(outstanding(g.port).values()) == {0} for g in (fleet.a, fleet.b)), "the held streams ended")
    wait_for(lambda: scalar(fleet.prometheus, trigger["query"]) == 0, "no demand once they ended")


def test_streams_synthesized_for_a_listener_that_reads_nothing_hide_no_other_gateways_streams(fleet):
    """Gateway a holds two streams whose listener reads nothing, and Triton synthesizes
    their first requests to the end: they are in flight on a, and in no count of Triton's.
    A stream that b opens then is what a counts elsewhere (taking a's requests in flight
    from the servers' count, it counted none); Triton's per-gateway series count b's alone,
    and none once every stream has ended."""
    fleet.in_dns(0, 2)

    async def run():
        ws, _ = await hold(fleet.a.port, ["a0", "a1"])
        try:
            await asyncio.to_thread(wait_for, lambda: fleet.synthesizing()[0] == 0, "a's requests synthesized", 60)
            held = sum(outstanding(fleet.a.port).values())
            b = Recorder(await holding_connection(f"ws://127.0.0.1:{fleet.b.port}{v1.PROTOCOL_PATH}"))
            try:
                await b.until("ready")
                await b.send(type="config", format="pcm_s16le", sample_rate=48000, length_scale=SLOW)
                await b.until("ready")
                assert await open_context(b, "b0") == "admitted"
                await asyncio.to_thread(
                    wait_for, lambda: sum(per_server(fleet.a.port, ELSEWHERE).values()) == 1, "b's stream counted by a", 10)
                return held, fleet.synthesizing()
            finally:
                await b.ws.close()
        finally:
            await ws.close()

    held, (total, by_gateway) = asyncio.run(run())
    assert held == 2  # a's two, still in flight
    assert total == 1 and {name: n for name, n in by_gateway.items() if n} == {f"{socket.gethostname()}/{fleet.b.process.pid}": 1}
    wait_for(lambda: fleet.synthesizing()[0] == 0 and set(fleet.synthesizing()[1].values()) == {0},
             "a request counted once every stream ended", 30)


def test_a_gateway_told_to_stop_ends_its_streams_done_and_its_listener_resumes_on_the_other(fleet):
    """Gateway a gets SIGTERM mid-paragraph: a short stream it is speaking ends `done`
    within the drain; a new one on it is refused `server_draining` and its /readyz says
    503, so a new connection goes to b; at the drain's end it closes with 1001 and the
    client library's longer context goes on on b to `done`."""
    urls = [fleet.a.url, fleet.b.url]
    text = " ".join(harvard_sentences()[:120])
    # Slow speech: a delivered 96 % of it at the voice's pace within the drain on a quiet host.
    config = {"format": "pcm_s16le", "sample_rate": 24000, "length_scale": SLOW}

    async def run():
        short = Recorder(await connection(urls[0]))
        await short.until("ready")
        async with await SpeechClient.connect(urls, resume=True, **config) as client:
            context = client.context()
            await context.speak(text)
            before, after = [], []
            async for event in context.events():
                (after if client.resumes else before).append(event)
                if event.frame and event.frame.seq == 2 and fleet.a.process.poll() is None and not after:
                    await short.send(type="speak", context_id="s", text="A short one.")
                    await short.until("audio_start", "s")
                    fleet.a.process.send_signal(signal.SIGTERM)
                    short_end = await ended(short, "s")
                    refused = await open_context(short, "late")
                    status = await asyncio.to_thread(readyz_status, fleet.a.port)
                    async with await SpeechClient.connect(urls[1], **config) as other:
                        new = [frame async for frame in other.speak("Over here.")]
        await asyncio.wait_for(short.ws.wait_closed(), 30)  # by a, at its drain's end
        return before, after, client.resumes, client.reconnect.used, short_end, refused, status, new, short

    before, after, resumes, used, short_end, refused, status, new, short_recorder = asyncio.run(asyncio.wait_for(run(), 120))
    assert fleet.a.process.wait(DRAIN_S + 20) == 0  # it exited cleanly
    assert short_end["type"] == "done" and whole(short_recorder, "s")
    assert short_recorder.ws.close_code == 1001  # going away: what the client library resumes on
    assert refused == v1.SERVER_DRAINING and status == 503
    assert new and new[-1].last  # the other gateway took a new connection and spoke
    assert any(e.frame for e in before) and any(e.frame for e in after)  # cut mid-paragraph by the 1001
    assert resumes == 1 and used == 1  # resumed once, on b
    heard = before + after
    frames = [e.frame for e in heard if e.frame]
    assert [f.seq for f in frames] == list(range(len(frames))) and frames[-1].last
    assert heard[-1].kind == "done"


async def ended(client: Recorder, context: str) -> dict:
    """The context's `done` or error message."""
    async with asyncio.timeout(60):
        while True:
            event = await client.read()
            if event.context_id == context and event.kind in ("done", "error"):
                return event.message


def readyz_status(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
