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
