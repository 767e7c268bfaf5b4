"""The shared underrun model: player starts 50 ms after the first frame, plays in real time."""

import pytest

from perf.tools.playback import stalls, stalls_heard

FRAME = 0.02  # 20 ms frames


def steady(n: int, every: float, t0: float = 100.0) -> list[tuple[float, float]]:
    """n frames of 20 ms, the i-th arriving at t0 + i*every."""
    return [(t0 + i * every, (i + 1) * FRAME) for i in range(n)]


def test_no_frames_no_stalls():
    assert stalls([]) == (0, 0.0)


def test_faster_than_real_time_never_stalls():
    assert stalls(steady(50, every=0.005)) == (0, 0.0)


def test_real_time_delivery_is_covered_by_the_lead():
    assert stalls(steady(50, every=FRAME)) == (0, 0.0)


def test_one_late_frame_is_one_stall_of_its_lateness():
    # Frame 3 (audio 60..80 ms) is needed at 50 + 60 = 110 ms but arrives at 150 ms.
    arrivals = steady(6, every=0.0)
    arrivals[3] = (100.150, arrivals[3][1])
    count, ms = stalls(arrivals)
    assert count == 1
    assert ms == pytest.approx(40.0)
    ((at, seconds),) = stalls_heard(arrivals)
    assert at == pytest.approx(3 * FRAME) and seconds == pytest.approx(0.040)  # where frame 3's audio starts


def test_a_stall_delays_what_follows():
    # After waiting 40 ms for frame 3, frame 4 is needed at 150 + 20 = 170 ms: 160 is in time.
    arrivals = steady(6, every=0.0)
    arrivals[3] = (100.150, arrivals[3][1])
    arrivals[4] = (100.160, arrivals[4][1])
    arrivals[5] = (100.160, arrivals[5][1])
    assert stalls(arrivals)[0] == 1


def test_slower_than_real_time_stalls_on_every_frame_past_the_lead():
    # 30 ms per 20 ms frame: 10 ms behind per frame; a 45 ms lead covers frames 1-4,
    # frame 5 waits 5 ms, and each of frames 6-10 another 10 ms.
    count, ms = stalls(steady(11, every=0.030), lead_s=0.045)
    assert count == 6
    assert ms == pytest.approx(55.0)


def test_lead_is_a_parameter():
    arrivals = [(0.0, FRAME), (0.5, 2 * FRAME)]
    assert stalls(arrivals, lead_s=0.0)[1] == pytest.approx(480.0)
    assert stalls(arrivals, lead_s=1.0) == (0, 0.0)


def test_the_player_frame_by_frame_tells_each_stall_when_it_ends():
    from perf.tools.playback import Player, Stall
    player = Player(lead_s=0.05)
    assert player.ahead(100.0) == 0.0 and player.arrive(100.0, FRAME) is None  # plays 100.05-100.07
    assert player.ahead(100.0) == pytest.approx(0.07)
    stall = player.arrive(100.57, FRAME)
    assert stall == Stall(pytest.approx(100.07), pytest.approx(0.5))
    assert player.arrive(100.58, FRAME) is None  # the stall put playback back: needed at 100.59
    assert player.ahead(100.60) == pytest.approx(0.01)


def test_the_player_stopped_tells_the_stall_under_way_and_plays_no_more():
    from perf.tools.playback import Player
    player = Player(lead_s=0.0)
    assert player.stop(5.0) is None  # nothing played: no stall
    player = Player(lead_s=0.0)
    player.arrive(0.0, 1.0)
    assert player.stop(0.5) is None  # still playing
    player = Player(lead_s=0.0)
    player.arrive(0.0, 1.0)
    assert player.stop(3.0).seconds == pytest.approx(2.0)
    assert player.arrive(3.5, 1.0) is None and player.stop(9.0) is None
