"""The throttle on wrong API keys and on refusal logs, sans I/O (the wire is in
test_gateway_limits.py)."""

from gateway.edge.access import KeyFailures, log_refusal


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_an_address_is_refused_past_the_limit_until_its_oldest_failure_leaves_the_window():
    clock = Clock()
    failures = KeyFailures(limit=3, window_s=60, clock=clock)
    for _ in range(3):
        assert failures.retry_after("a") is None
        failures.failed("a")
        clock.now += 10
    assert failures.retry_after("a") == 30  # the first failure, at 1000, leaves at 1060; now is 1030
    assert failures.retry_after("b") is None  # other addresses are not held up
    clock.now += 30
    assert failures.retry_after("a") is None


def test_no_limit_counts_nothing_and_forgotten_addresses_are_dropped():
    clock = Clock()
    unlimited = KeyFailures(limit=0, clock=clock)
    for _ in range(100):
        unlimited.failed("a")
    assert unlimited.retry_after("a") is None
    failures = KeyFailures(limit=3, window_s=60, clock=clock)
    for address in range(2000):
        failures.failed(str(address))
    clock.now += 61
    failures.failed("late")
    assert set(failures._failures) == {"late"}  # the rest expired and were swept


def test_a_flood_of_refusals_logs_once_per_kind_and_interval(caplog):
    with caplog.at_level("WARNING", logger="speechstream.gateway"):
        for i in range(1000):
            log_refusal(f"a flood test refusal from 10.0.0.{i % 250}")
        log_refusal("another kind of flood test refusal from 10.0.0.1")
    assert [r.getMessage() for r in caplog.records] == [
        "refused a flood test refusal from 10.0.0.0", "refused another kind of flood test refusal from 10.0.0.1",
    ]
