"""The admission queue, sans I/O: order, positions, leaving, and its bound."""

from gateway.edge.admission import AdmissionQueue, Waiter, keeping_ahead


class Log:
    def __init__(self):
        self.events = []

    def waiter(self, key, client="a"):
        return Waiter(key, client, lambda: self.events.append((key, "admitted")),
                      lambda position: self.events.append((key, position)))


def test_waiters_are_told_their_place_and_the_queue_is_bounded():
    log, queue = Log(), AdmissionQueue(2)
    assert queue.join(log.waiter("x")) == 1 and queue.join(log.waiter("y")) == 2
    assert queue.join(log.waiter("z")) is None and len(queue) == 2
    assert log.events == []  # a joiner hears its position from the join itself


def test_pump_admits_in_order_while_admissible_and_moves_the_rest_up():
    log, queue = Log(), AdmissionQueue(4)
    for key in "wxyz":
        queue.join(log.waiter(key))
    room = [2]

    def admissible(client):
        room[0] -= 1
        return room[0] >= 0

    assert queue.pump(admissible) == 2
    assert log.events == [("w", "admitted"), ("x", "admitted"), ("y", 1), ("z", 2)]
    assert queue.pump(lambda client: False) == 0 and len(log.events) == 4  # nobody moved: nobody told


def test_a_client_at_its_share_is_passed_over_for_one_below_it():
    log, queue = Log(), AdmissionQueue(4)
    queue.join(log.waiter("g1", "greedy"))
    queue.join(log.waiter("n1", "normal"))
    assert queue.pump(lambda client: client == "normal") == 1
    assert log.events == [("n1", "admitted")]  # g1 keeps position 1


def test_leaving_moves_those_behind_up():
    log, queue = Log(), AdmissionQueue(4)
    for key in "xyz":
        queue.join(log.waiter(key))
    queue.leave("x")
    assert log.events == [("y", 1), ("z", 2)] and len(queue) == 2
    queue.leave("absent")
    assert len(log.events) == 2


def test_past_the_admitted_load_streams_ahead_of_their_listeners_leave_room_up_to_the_peak():
    # 20 streams open against a capacity of 20 (past 0.9 of it): all 3 s or more ahead.
    assert keeping_ahead([3.0, 7.5, 12.0], open_streams=20, capacity=20, slack_s=3.0, peak=1.25)
    assert not keeping_ahead([2.9, 7.5], open_streams=20, capacity=20, slack_s=3.0, peak=1.25)  # one falls behind
    assert not keeping_ahead([8.0], open_streams=25, capacity=20, slack_s=3.0, peak=1.25)  # the 26th: past the peak
    assert not keeping_ahead([8.0], open_streams=20, capacity=20, slack_s=0.0, peak=1.25)  # turned off
    # Streams that started together each wait for their first audio (lead 0): no room.
    assert not keeping_ahead([0.0] * 19, open_streams=19, capacity=20, slack_s=3.0, peak=1.25)
    assert keeping_ahead([], open_streams=19, capacity=20, slack_s=3.0, peak=1.25)  # open, with nothing to speak
