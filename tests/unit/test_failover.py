"""Failover of a stateless stage's calls (python_backends/failover.py), in process: a lost
call issued again, a late one issued again beside it, its timeout and hedge from recent calls."""

import asyncio

import pytest

from python_backends.failover import (
    COLD_S,
    FLOOR_S,
    HEDGE_FLOOR_S,
    HEDGE_MULTIPLE,
    MIN_CALLS,
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


def test_a_calls_hedge_follows_recent_calls_per_frame_with_a_floor_and_waits_for_them():
    times = CallTimes()
    assert times.hedge_s(100) is None  # nothing measured yet: no call is hedged
    for _ in range(MIN_CALLS):
        times.record(100, 0.02)  # 0.2 ms a frame
    assert times.hedge_s(100) == HEDGE_FLOOR_S
    assert times.hedge_s(1000) == pytest.approx(HEDGE_MULTIPLE * 0.0002 * 1000)
    assert times.hedge_s(1000) < times.timeout_s(1000)


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


def late_calls(failover: Failover, hedge_s: float = 0.05) -> tuple[list[asyncio.Future], Failover]:
    """Answers the failover's calls will await, in order, the first hedged after `hedge_s`."""
    failover.times.hedge_s = lambda frames: hedge_s
    loop = asyncio.get_running_loop()
    return [loop.create_future() for _ in range(failover.attempts)], failover


def test_a_call_unanswered_past_its_hedge_is_issued_beside_it_and_the_first_answer_taken():
    async def main():
        answers, failover = late_calls(Failover())
        answers[1].set_result("hedge")
        issued, told = [], []

        async def issue():
            issued.append(1)
            return await answers[len(issued) - 1]

        result = await failover.call(issue, 10, lambda why, attempt: told.append((str(why), attempt)))
        late = len(failover.late)
        answers[0].set_result("first, late")  # dropped
        for _ in range(3):
            await asyncio.sleep(0)
        return result, len(issued), told, late, len(failover.late)

    result, issued, told, late, still_late = run(main())
    assert (result, issued, told) == ("hedge", 2, [("no answer after 0.05 s", 2)])
    assert (late, still_late) == (1, 0)


def test_the_first_attempt_answering_after_the_hedge_went_is_taken_and_the_hedge_dropped():
    async def main():
        answers, failover = late_calls(Failover())
        issued = []

        async def issue():
            issued.append(1)
            if len(issued) == 2:  # the hedge is out: the first answers now
                answers[0].set_result("first")
            return await answers[len(issued) - 1]

        result = await failover.call(issue, 10, lambda *_: None)
        return result, len(issued), len(failover.late)

    assert run(main()) == ("first", 2, 1)  # the hedge, still out, is dropped when it answers


def test_a_call_lost_while_its_hedge_flies_waits_for_the_hedge_and_issues_no_third():
    async def main():
        answers, failover = late_calls(Failover(attempts=3))
        issued, told = [], []

        async def issue():
            issued.append(1)
            if len(issued) == 2:  # the hedge is out: the first is lost, the hedge answers later
                answers[0].set_exception(Lost("Stub process 'vocoder_0_1' is not healthy."))
                asyncio.get_running_loop().call_later(0.02, answers[1].set_result, "hedge")
            return await answers[len(issued) - 1]

        result = await failover.call(issue, 10, lambda why, attempt: told.append(attempt))
        return result, len(issued), told

    # Hedged again 0.05 s after the hedge: the hedge answered within 0.02 s of the loss.
    assert run(main()) == ("hedge", 2, [2])


def test_a_call_with_another_error_raises_it_at_once_though_its_hedge_flies():
    async def main():
        answers, failover = late_calls(Failover())
        issued = []

        async def issue():
            issued.append(1)
            if len(issued) == 2:
                answers[0].set_exception(ValueError("unknown voice"))
            return await answers[len(issued) - 1]

        with pytest.raises(ValueError, match="unknown voice"):
            await failover.call(issue, 10, lambda *_: None)
        return len(issued), len(failover.late)

    assert run(main()) == (2, 1)


def test_one_hedge_at_a_time_while_many_calls_are_late_at_once():
    """A host slowed at once makes every call late: only one is issued again beside it
    until that hedge ends; the others wait for their first attempt's answer."""

    async def main():
        failover = Failover()
        failover.times.hedge_s = lambda frames: 0.02
        loop = asyncio.get_running_loop()
        issued = []

        async def issue():
            issued.append(1)
            await asyncio.sleep(0.1)  # every attempt answers, slowly
            return len(issued)

        started = loop.time()
        results = await asyncio.gather(*(failover.call(issue, 10, lambda *_: None) for _ in range(4)))
        return len(results), len(issued), loop.time() - started

    calls, issued, seconds = run(main())
    assert (calls, issued) == (4, 5) and seconds < 0.5
