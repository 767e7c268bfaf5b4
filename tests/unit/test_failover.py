"""Failover of a stateless stage's calls (python_backends/failover.py), in process: a lost
call issued again, its timeout from recent calls."""

import asyncio

import pytest

from python_backends.failover import (
    COLD_S,
    FLOOR_S,
    MIN_CALLS,
    SUSPECT_COLD_S,
    SUSPECT_FLOOR_S,
    SUSPECT_MULTIPLE,
    TIMEOUT_MULTIPLE,
    CallTimes,
    Failover,
    Lost,
)


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 10))


def test_a_calls_timeout_follows_recent_calls_per_frame_with_a_floor():
    times = CallTimes()
    assert times.timeout_s(100) == COLD_S  # nothing measured yet
    for _ in range(MIN_CALLS):
        times.record(100, 0.2)  # 2 ms a frame
    assert times.timeout_s(100) == FLOOR_S  # 4 x 0.2 s is below the floor
    assert times.timeout_s(1000) == pytest.approx(TIMEOUT_MULTIPLE * 0.002 * 1000)
    for _ in range(MIN_CALLS):
        times.record(100, 1.0)  # a busy host: calls five times slower
    assert times.timeout_s(1000) == pytest.approx(TIMEOUT_MULTIPLE * 0.01 * 1000)


def test_a_lost_call_is_issued_again_and_told_once_per_attempt():
    async def main():
        failover, issued, told = Failover(), [], []

        async def issue():
            issued.append(len(issued))
            if len(issued) == 1:
                raise Lost("Stub process 'vocoder_0_1' is not healthy.")
            return "pcm"

        result = await failover.call(issue, 10, lambda why, attempt: told.append((str(why), attempt)))
        return result, issued, told

    result, issued, told = run(main())
    assert result == "pcm" and issued == [0, 1]
    assert told == [("Stub process 'vocoder_0_1' is not healthy.", 2)]


def test_a_call_lost_at_every_attempt_fails_with_the_last_loss_and_other_errors_at_once():
    async def main():
        failover, issued = Failover(attempts=3), []

        async def lost():
            issued.append(1)
            raise Lost(f"lost {len(issued)}")

        with pytest.raises(Lost, match="lost 3"):
            await failover.call(lost, 10, lambda *_: None)

        async def bad_input():
            issued.append(1)
            raise ValueError("unknown voice")

        with pytest.raises(ValueError):
            await failover.call(bad_input, 10, lambda *_: None)
        return len(issued)

    assert run(main()) == 3 + 1


def test_a_call_past_its_timeout_is_issued_again_and_its_late_answer_dropped():
    async def main():
        failover = Failover()
        failover.times.timeout_s = lambda frames: 0.05
        answers = [asyncio.get_running_loop().create_future(), asyncio.get_running_loop().create_future()]
        answers[1].set_result("second")

        async def issue(answer=iter(answers)):
            return await next(answer)

        told = []
        result = await failover.call(issue, 10, lambda why, attempt: told.append(str(why)))
        late = len(failover.late)
        answers[0].set_exception(RuntimeError("its stub continued"))  # the late answer: dropped, not raised
        for _ in range(3):  # the call wakes, ends, then its callback runs
            await asyncio.sleep(0)
        return result, told, late, len(failover.late)

    result, told, late, still_late = run(main())
    assert result == "second" and told == ["no answer within 0.1 s"]
    assert (late, still_late) == (1, 0)


def hanging_then(answer: str):
    """An `issue` whose first call never answers (its stub dead) and whose next ones answer."""
    calls = []

    async def issue():
        calls.append(1)
        if len(calls) == 1:
            await asyncio.Event().wait()
        return answer

    return issue


def test_an_attempt_past_its_suspect_time_is_issued_again_when_a_stub_of_its_stage_faulted_lately():
    async def main(faulty: bool):
        failover = Failover(faulty=lambda: faulty)
        failover.times.suspect_s = lambda frames: 0.1
        failover.times.timeout_s = lambda frames: 0.3
        told = []
        result = await failover.call(hanging_then("pcm"), 10, lambda why, attempt: told.append(str(why)))
        return result, told

    assert run(main(faulty=True)) == ("pcm", ["no answer within 0.1 s, a stub of the stage lately dead or stopped"])
    assert run(main(faulty=False)) == ("pcm", ["no answer within 0.3 s"])  # healthy: a slow call is waited for


def test_the_last_attempt_is_not_judged_by_its_suspect_time():
    async def main():
        failover = Failover(attempts=3, faulty=lambda: True)
        failover.times.suspect_s = lambda frames: 0.01
        failover.times.timeout_s = lambda frames: 0.2
        told = []

        async def hangs():
            await asyncio.Event().wait()

        with pytest.raises(Lost, match=r"no answer within 0\.2 s$"):
            await failover.call(hangs, 10, lambda why, attempt: told.append((str(why), attempt)))
        return told

    suspected = "no answer within 0.0 s, a stub of the stage lately dead or stopped"
    assert run(main()) == [(suspected, 2), (suspected, 3)]


def test_a_calls_suspect_time_follows_recent_calls_with_a_lower_floor():
    times = CallTimes()
    assert times.suspect_s(100) == SUSPECT_COLD_S < COLD_S
    for _ in range(MIN_CALLS):
        times.record(100, 0.01)  # 0.1 ms a frame
    assert times.suspect_s(100) == SUSPECT_FLOOR_S
    assert times.suspect_s(2000) == pytest.approx(SUSPECT_MULTIPLE * 0.0001 * 2000)  # past its floor
    assert times.timeout_s(1000) == FLOOR_S  # a timeout is judged by the same calls, its floor higher
