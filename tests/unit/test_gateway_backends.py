import math
from collections import Counter

import pytest

from contract import models as c
from gateway.backends import fleet
from gateway.backends.servers import Backend, Backends, choose
from gateway.edge.service import Gateway, admits
from gateway.settings import Settings
from speechstream import protocol as v1
from tests.unit.test_gateway_session import jobs, send, session, speech


def backend(url, up=True, outstanding=0):
    return Backend(url, triton=None, up=up, outstanding=outstanding)


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
    backend = Backend("triton:8001", triton=None)
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


def test_a_server_that_has_not_measured_is_left_out_of_the_capacity_not_a_reason_to_admit_all():
    """A new server (a scale-up) once switched admission off everywhere until it had measured."""
    a, b, gone = backend("a"), backend("b"), backend("c", up=False)
    backends = Backends(())
    backends.all = [a, b, gone]
    assert backends.capacity is None  # none has measured: nothing to admit by
    a.capacity_by_model = {c.TTS_MODEL: 6.0}
    b.elsewhere = 3  # what it serves for other gateways is left out with it
    assert backends.capacity == 6.0 and backends.elsewhere == 0
    b.capacity_by_model, gone.capacity_by_model = {c.TTS_MODEL: 4.5}, {c.TTS_MODEL: 100.0}
    assert backends.capacity == 10.5 and backends.elsewhere == 3  # what is down does not count
    b.draining = True  # leaving: it takes no new stream
    assert backends.capacity == 6.0


def test_a_model_that_has_not_measured_does_not_switch_admission_off():
    """An AR stream's capacity (0 until tts_ar has measured) once overwrote the one
    `tts` had measured, and admission was off for every voice until the next Piper chunk."""
    server = backend("a")
    backends = Backends(())
    backends.all = [server]
    server.capacity_by_model[c.TTS_MODEL] = 6.0
    server.capacity_by_model[c.TTS_AR_MODEL] = 0.0  # what tts_ar says before it has measured
    assert backends.capacity == 6.0
    server.capacity_by_model[c.TTS_AR_MODEL] = 2.5  # both families share the cores: the least counts
    assert backends.capacity == 2.5


def test_streams_past_the_admission_load_of_the_capacity_are_refused_as_busy():
    # No room past the load for streams ahead of their listeners (test_gateway_admission.py).
    gateway = Gateway(Settings(triton_urls=(), admission_load=0.5, max_streams_per_client=0, admission_slack_s=0))
    server = backend("a")
    gateway.backends.all = [server]
    gateway.http_streams.update({"10.0.0.1": 1, "10.0.0.2": 2})
    assert gateway.stream_refusal("10.0.0.3") is None  # capacity not measured: admit
    server.capacity_by_model = {c.TTS_MODEL: 8.0}
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
    assert admits(Counter({"greedy": 9}), "normal", limit)  # the tenth stays within the limit
    assert admits(Counter({"a": 16}), "b", 17.3) and not admits(Counter({"a": 17}), "a", 17.3)  # no 18th in 17.3
    assert admits(Counter(), "a", 0.4) and not admits(Counter({"a": 1}), "b", 0.4)  # less than a stream: one
    assert not admits(Counter(), "a", 0.7, elsewhere=1)  # another gateway's stream is the one
    full = Counter({"greedy": 10})
    assert not admits(full, "greedy", limit)
    assert admits(full, "normal", limit)  # 0 < 10 // 2: its share
    assert admits(full + Counter({"normal": 4}), "normal", limit) and not admits(
        full + Counter({"normal": 5}), "normal", limit)
    crowd = Counter({f"c{i}": 1 for i in range(10)})  # ten clients, one stream each
    assert not admits(crowd, "newcomer", limit)  # 10 // 11 = 0: no share left to give


def test_streams_other_gateways_serve_take_their_share_of_the_capacity():
    """G gateways once each admitted up to the capacity of all the servers: G times too much."""
    gateway = Gateway(Settings(triton_urls=(), admission_load=0.5, max_streams_per_client=0))
    server = backend("a")
    server.capacity_by_model = {c.TTS_MODEL: 8.0}  # 4 streams admitted in all
    gateway.backends.all = [server]
    gateway.http_streams.update({"10.0.0.1": 1})
    server.serving(3, 0)  # the server serves 3, none of them this gateway's requests yet
    refusal = gateway.stream_refusal("10.0.0.1")
    assert refusal.code == v1.SERVER_BUSY  # 1 here + 3 elsewhere fill 0.5 × 8
    server.serving(4, 1)  # this gateway's stream now runs on the server, and is in its count: not counted twice
    assert server.elsewhere == 3 and gateway.stream_refusal("10.0.0.1").code == v1.SERVER_BUSY
    server.serving(3, 1)  # one of the others' ended
    assert gateway.stream_refusal("10.0.0.1") is None


def test_this_gateways_requests_the_server_has_synthesized_do_not_hide_the_others():
    """Its requests still in flight to listeners that read slowly, which the server has
    synthesized to their ends, are in neither of its counts: the others' 3 are all there."""
    server = backend("a")
    server.outstanding = 4  # 4 in flight, 1 of them still being synthesized
    server.serving(4, 1)
    assert server.elsewhere == 3


def test_a_server_whose_metrics_cannot_be_read_counts_this_gateways_streams_only():
    server = backend("a")
    server.serving(5, 0)
    server.unread("http://a:8002/metrics: connection refused")
    assert server.elsewhere == 0 and server.uncounted
    server.serving(2, 0)
    assert server.elsewhere == 2 and server.uncounted is None


EXPOSITION = """# HELP nv_inference_pending_request_count Instantaneous number of pending requests
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="tts",version="1"} 0
# HELP speechstream_tts_active_requests tts requests being synthesized now
# TYPE speechstream_tts_active_requests gauge
speechstream_tts_active_requests 3
# HELP speechstream_tts_active_requests_by_gateway tts requests being synthesized now, by the gateway that sent them
# TYPE speechstream_tts_active_requests_by_gateway gauge
speechstream_tts_active_requests_by_gateway{gateway="gw-a/12"} 1
speechstream_tts_active_requests_by_gateway{gateway="gw-b/7"} 2
# HELP speechstream_talker_running_requests requests in the batch
# TYPE speechstream_talker_running_requests gauge
speechstream_talker_running_requests 7
"""


def test_what_a_server_serves_is_read_from_its_tts_gauge():
    assert fleet.serving(EXPOSITION, "gw-b/7") == (3, 2)
    assert fleet.serving(EXPOSITION, "gw-c/1") == (3, 0)  # none of them this gateway's
    assert fleet.serving("# no tts loaded\n", "gw-a/12") == (0, 0)


def test_a_stream_awaiting_its_first_audio_is_starting_to_the_others_until_its_audio_comes():
    gateway = Gateway(Settings(triton_urls=()))
    (a, _, clock), (b, _, _) = session(), session()
    gateway.sessions.update({a: "10.0.0.1", b: "10.0.0.2"})
    (job,) = jobs(send(a, type="speak", context_id="a", text="One sentence. " * 20))
    jobs(send(b, type="speak", context_id="b", text="Another sentence."))
    assert gateway.others_starting(a, "a") == 1 and gateway.others_starting(b, "b") == 1
    clock.now += 1.0
    assert a.audio(job.id, speech(0.5), 0, []) == []  # half real time: held by its gate, but come
    assert gateway.others_starting(a, "a") == 1 and gateway.others_starting(b, "b") == 0
    with gateway.http_stream("10.0.0.3") as pace:  # an HTTP speech request awaiting its first audio
        assert gateway.others_starting(a, "a") == 2 and gateway.others_starting(b, "b") == 1
        pace.heard_at = clock.now
        assert gateway.others_starting(b, "b") == 0
    with gateway.http_stream("10.0.0.3") as pace:
        pace.streamed = False  # a transcription: no audio to await
        assert gateway.others_starting(b, "b") == 0


def test_the_other_streams_first_chunks_take_their_audio_over_the_capacity_to_make():
    gateway = Gateway(Settings(triton_urls=()))
    server = backend("a")
    gateway.backends.all = [server]
    sessions = [session()[0] for _ in range(3)]
    gateway.sessions.update({s: f"10.0.0.{i}" for i, s in enumerate(sessions)})
    first = sessions[0]
    jobs(send(first, type="speak", context_id="a", text="One sentence."))
    assert gateway.others_first_s(first, "a", 1.5) == 0.0  # nobody else is starting
    for s in sessions[1:]:
        jobs(send(s, type="speak", context_id="b", text="Another sentence."))
    assert gateway.others_first_s(first, "a", 1.5) == math.inf  # the capacity is not measured yet
    server.capacity_by_model = {c.TTS_MODEL: 6.0}  # real-time streams: 6 s of audio a second
    assert gateway.others_first_s(first, "a", 1.5) == pytest.approx(2 * 1.5 / 6.0)


def test_a_start_is_in_time_with_room_in_its_clients_share_and_its_other_streams_sounded_and_further_ahead():
    gateway = Gateway(Settings(triton_urls=(), admission_load=0.5))
    server = backend("a")
    gateway.backends.all = [server]
    (playing, _, clock), (starting, _, _) = session(), session()
    gateway.sessions.update({playing: "10.0.0.1", starting: "10.0.0.1"})  # one client's two connections
    (job,) = jobs(send(playing, type="speak", context_id="a", text="One sentence. " * 20))
    clock.now += 0.1
    playing.audio(job.id, speech(2.0), 0, [])  # 2 s of audio in 0.1 s: out at once
    clock.now += 0.5
    jobs(send(starting, type="speak", context_id="b", text="Another sentence."))
    (lead,) = playing.leads()
    assert 1.0 < lead < 2.0 and starting.leads() == [0.0]  # b awaits its first audio
    assert not gateway.starts_in_time(starting, "b", 0.01)  # the capacity is not measured yet
    server.capacity_by_model = {c.TTS_MODEL: 6.0}  # 0.5 × 6: room for 3 streams, 2 open
    assert gateway.starts_in_time(starting, "b", lead - 0.1) and not gateway.starts_in_time(starting, "b", lead + 0.1)
    assert not gateway.starts_in_time(playing, "a", 0.01)  # b has not sounded
    gateway.http_streams["10.0.0.1"] = 1  # a third stream of the client's fills the room
    assert not gateway.starts_in_time(starting, "b", 0.01)
    del gateway.http_streams["10.0.0.1"]
    server.serving(1, 0)  # a stream through another gateway, its lead unknown here
    assert not gateway.starts_in_time(starting, "b", 0.01)


def test_another_clients_streams_behind_their_listeners_do_not_hold_a_start_within_its_share():
    """tts serves each client its share first: a flood's streams, however far behind,
    take nothing from a normal client's next calls."""
    gateway = Gateway(Settings(triton_urls=(), admission_load=1.0))
    server = backend("a")
    server.capacity_by_model = {c.TTS_MODEL: 6.0}
    gateway.backends.all = [server]
    (flood, _, clock), (normal, _, _) = session(), session()
    gateway.sessions.update({flood: "10.0.0.2", normal: "10.0.0.1"})
    (job,) = jobs(send(flood, type="speak", context_id="a", text="One sentence. " * 20))
    clock.now += 0.1
    flood.audio(job.id, speech(0.5), 0, [])  # out at once, then nothing more for a second
    clock.now += 1.0
    (behind,) = flood.leads()
    assert behind < 0
    jobs(send(normal, type="speak", context_id="b", text="Another sentence."))
    gateway.http_streams["10.0.0.2"] = 5  # the flood's other streams
    assert gateway.starts_in_time(normal, "b", 0.01)  # 6 ÷ 2 clients: room for 2 more of its own
    gateway.http_streams.update({"10.0.0.3": 1, "10.0.0.4": 1})
    assert not gateway.starts_in_time(normal, "b", 0.01)  # 6 ÷ 4 clients: no room for another
