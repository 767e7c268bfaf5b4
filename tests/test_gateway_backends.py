from collections import Counter

from gateway.backends import Backend, Backends, choose
from gateway.service import Gateway, admits
from gateway.settings import Settings
from contract import models as c
from contract import protocol as v1


def backend(url, up=True, outstanding=0):
    return Backend(url, client=None, up=up, outstanding=outstanding)


def test_the_least_loaded_backend_that_is_up_is_chosen():
    a, b, c = backend("a", outstanding=3), backend("b", outstanding=1), backend("c", up=False)
    assert choose([a, b, c]) is b
    b.outstanding = 5
    assert choose([a, b, c]) is a


def test_with_none_up_the_least_loaded_is_tried_anyway():
    a, b = backend("a", up=False, outstanding=2), backend("b", up=False, outstanding=1)
    assert choose([a, b]) is b


def test_ties_go_to_the_first_so_one_backend_fills_evenly_with_another():
    a, b = backend("a"), backend("b")
    picks = []
    for _ in range(4):
        chosen = choose([a, b])
        chosen.outstanding += 1
        picks.append(chosen.url)
    assert picks == ["a", "b", "a", "b"]


def test_a_backend_that_comes_back_is_ready_only_once_probed_again():
    backend = Backend("triton:8001", client=None)
    assert not backend.ready and backend.state.startswith("down: ")
    backend.mark(True)
    assert not backend.ready and backend.state == "cannot synthesize: not probed yet"
    backend.probed(None)
    assert backend.ready and backend.state == "ready"
    backend.mark(False, "connection refused")
    assert backend.state == "down: connection refused"
    backend.mark(True)
    assert not backend.ready  # its old probe no longer counts
    backend.probed("Triton made no progress for 3 s")
    assert backend.state == "cannot synthesize: Triton made no progress for 3 s"


def test_requests_go_to_ready_servers_first_then_to_servers_up():
    probed, unprobed, down = Backend("a", None, up=True), Backend("b", None, up=True), Backend("c", None)
    probed.probed(None)
    probed.outstanding = 5
    assert choose([probed, unprobed, down]) is probed
    probed.probed("stalled")
    assert choose([probed, unprobed, down]) is unprobed  # the less loaded of those up


def test_capacity_is_known_once_every_server_up_has_measured_its_own():
    a, b, gone = backend("a"), backend("b"), backend("c", up=False)
    backends = Backends(())
    backends.all = [a, b, gone]
    a.capacity = {c.TTS_MODEL: 6.0}
    assert backends.capacity is None  # b has not measured yet
    b.capacity, gone.capacity = {c.TTS_MODEL: 4.5}, {c.TTS_MODEL: 100.0}
    assert backends.capacity == 10.5  # what is down does not count


def test_a_model_that_has_not_measured_does_not_switch_admission_off():
    """An AR stream's capacity (0 until tts_ar has measured) once overwrote the one
    `tts` had measured, and admission was off for every voice until the next Piper chunk."""
    server = backend("a")
    backends = Backends(())
    backends.all = [server]
    server.capacity[c.TTS_MODEL] = 6.0
    server.capacity[c.TTS_AR_MODEL] = 0.0  # what tts_ar says before it has measured
    assert backends.capacity == 6.0
    server.capacity[c.TTS_AR_MODEL] = 2.5  # both families share the cores: the least counts
    assert backends.capacity == 2.5


def test_streams_past_the_admission_load_of_the_capacity_are_refused_as_busy():
    gateway = Gateway(Settings(triton_urls=(), admission_load=0.5, max_streams_per_client=0))
    server = backend("a")
    gateway.backends.all = [server]
    gateway.http_streams.update({"10.0.0.1": 1, "10.0.0.2": 2})
    assert gateway.stream_refusal("10.0.0.3") is None  # capacity not measured: admit
    server.capacity = {c.TTS_MODEL: 8.0}
    assert gateway.stream_refusal("10.0.0.3") is None  # 3 open < 0.5 × 8
    gateway.http_streams["10.0.0.3"] += 1
    refusal = gateway.stream_refusal("10.0.0.3")
    assert refusal.code == v1.SERVER_BUSY and refusal.retry_after_ms > 0
    unlimited = Gateway(Settings(triton_urls=(), admission_load=0))
    unlimited.backends.all = [server]
    unlimited.http_streams.update({"10.0.0.1": 100})
    assert unlimited.stream_refusal("10.0.0.2") is None


def test_at_capacity_a_client_under_its_fair_share_is_still_admitted():
    limit = 10.0
    assert admits(Counter({"greedy": 9}), "normal", limit)  # under the limit
    full = Counter({"greedy": 10})
    assert not admits(full, "greedy", limit)
    assert admits(full, "normal", limit)  # 0 < 10 // 2: its share
    assert admits(full + Counter({"normal": 4}), "normal", limit) and not admits(
        full + Counter({"normal": 5}), "normal", limit)
    crowd = Counter({f"c{i}": 1 for i in range(10)})  # ten clients, one stream each
    assert not admits(crowd, "newcomer", limit)  # 10 // 11 = 0: no share left to give
