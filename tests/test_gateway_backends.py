from gateway.backends import Backend, choose


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
