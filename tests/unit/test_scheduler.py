"""The deadline scheduler and playback clock, in process (no Triton)."""

import asyncio

import numpy as np
import pytest

from python_backends.chunking import ChunkParams
from python_backends.piper.pipeline import LatentSentence, stream_pcm
from python_backends.scheduler import PLAYER_LEAD_S, RECENT_S, URGENT_S, DeadlineScheduler, PlaybackClock, Streams
from tests.engine_stages import whole_latent


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 10))


async def occupy(scheduler: DeadlineScheduler, release: asyncio.Event) -> asyncio.Task:
    """A call holding one slot until `release` is set."""
    task = asyncio.ensure_future(scheduler.run(0.0, release.wait))
    await asyncio.sleep(0)
    return task


def test_waiting_calls_run_earliest_deadline_first():
    async def main():
        scheduler = DeadlineScheduler(1)
        release = asyncio.Event()
        holder = await occupy(scheduler, release)
        order = []

        async def call(deadline):
            async def work():
                order.append(deadline)
            await scheduler.run(deadline, work)

        calls = [asyncio.ensure_future(call(d)) for d in (5.0, 1.0, 3.0, 1.0, 2.0)]
        await asyncio.sleep(0)
        assert scheduler.waiting == 5 and order == []
        release.set()
        await asyncio.gather(holder, *calls)
        return order

    assert run(main()) == [1.0, 1.0, 2.0, 3.0, 5.0]


def test_a_client_with_fewer_calls_running_goes_first_whatever_the_deadlines():
    """Above capacity the greedy client's streams are late (deadlines long past); a
    newcomer still gets the next free slot, and then the clients alternate."""

    async def main():
        scheduler = DeadlineScheduler(2)
        order = []

        async def call(client, deadline):
            async def work():
                order.append(client)
                await asyncio.sleep(0.001)
            await scheduler.for_client(client).run(deadline, work)

        greedy = [asyncio.ensure_future(call("greedy", -100.0 + i)) for i in range(6)]
        await asyncio.sleep(0)  # two of them run, four wait
        assert scheduler.running == {"greedy": 2} and scheduler.waiting == 4
        normal = [asyncio.ensure_future(call("normal", 0.0)) for _ in range(2)]
        await asyncio.gather(*greedy, *normal)
        return order

    order = run(main())
    assert order[:3] == ["greedy", "greedy", "normal"]  # the first slot freed goes to the newcomer
    assert order.index("normal", 3) < 6  # and its next call does not wait for all of greedy's


def test_the_scheduler_counts_the_time_its_calls_hold_a_slot():
    async def main():
        scheduler = DeadlineScheduler(1)
        await scheduler.run(0.0, lambda: asyncio.sleep(0.05))
        scheduler.meter.made(1.0)
        return scheduler.meter.capacity

    assert 0 < run(main()) <= 1.0 / 0.05


def test_capacity_counts_the_cores_a_call_had_not_the_slots_there_are():
    """With a slot more than the cores, one call alone had one core: the capacity is the
    cores' worth of its speed, not the slots'."""
    now = [0.0]
    scheduler = DeadlineScheduler(3, cores=2, now=lambda: now[0])

    async def one_call():
        def work():
            now[0] += 1.0
            return asyncio.sleep(0)

        await scheduler.run(0.0, work, "a")

    run(one_call())
    scheduler.meter.made(3.0)  # 3 s of audio in one core-second
    assert scheduler.meter.workers == 2 and scheduler.meter.capacity == pytest.approx(6.0, rel=0.01)


def test_a_client_is_loaded_past_its_fair_share_of_the_slots():
    scheduler, streams = DeadlineScheduler(4), Streams()

    def called(client):
        run(scheduler.for_client(client).run(0.0, lambda: asyncio.sleep(0)))
        return scheduler.share()

    greedy = [streams.serving("greedy", PlaybackClock(22050)) for _ in range(3)]
    with greedy[0], greedy[1], greedy[2]:
        share = called("greedy")
        assert share == 4 and not streams.over_share("greedy", share)  # alone, all 4 slots are its share
        with streams.serving("normal", PlaybackClock(22050)):
            share = called("normal")
            assert share == 2 and streams.over_share("greedy", share)  # 3 streams > 2 slots each for 2 clients
            assert not streams.over_share("normal", share)
        with streams.serving("greedy", PlaybackClock(22050)), streams.serving("greedy", PlaybackClock(22050)):
            assert streams.over_share("greedy", 4)  # 5 > 4
    assert streams.by_client == {}


def test_streams_count_those_starting_until_their_first_audio_or_their_end():
    streams, a, b, c = Streams(), PlaybackClock(22050), PlaybackClock(22050), PlaybackClock(22050)
    with streams.serving("a", a), streams.serving("b", b):
        assert streams.silent == 2
        a.start()
        a.start()  # later audio: counted once
        assert streams.silent == 1
        with streams.serving("c", c):
            assert streams.silent == 2
        assert streams.silent == 1  # c ended silent
    assert streams.silent == 0 and streams.by_client == {}


def test_streams_are_ahead_of_a_newcomer_while_every_other_has_sounded_and_has_audio_in_hand():
    now = [0.0]
    streams, newcomer, other = Streams(), PlaybackClock(100, now=lambda: now[0]), PlaybackClock(100, now=lambda: now[0])
    with streams.serving("a", newcomer):
        assert streams.ahead_of(newcomer, 1.0)  # alone
        with streams.serving("b", other):
            assert not streams.ahead_of(newcomer, 1.0)  # the other is starting too
            other.start()
            other.planned = 150  # 1.5 s planned, from PLAYER_LEAD_S on
            assert streams.ahead_of(newcomer, 1.0) and not streams.ahead_of(newcomer, 1.6)
            now[0] = 0.6  # its listener has played 0.55 s of it
            assert not streams.ahead_of(newcomer, 1.0) and streams.ahead_of(newcomer, 0.9)
            assert not streams.ahead_of(other, 0.0)  # the newcomer, seen from the other, is starting


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_no_more_than_slots_calls_run_at_once(slots):
    async def main():
        scheduler = DeadlineScheduler(slots)
        running, peak = 0, 0

        async def work():
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.001)
            running -= 1

        await asyncio.gather(*(scheduler.run(float(i % 4), work) for i in range(20)))
        return peak, scheduler.busy

    assert run(main()) == (slots, 0)


def test_a_caller_cancelled_while_waiting_never_runs_and_frees_nothing_twice():
    async def main():
        scheduler = DeadlineScheduler(1)
        release = asyncio.Event()
        holder = await occupy(scheduler, release)
        ran = []

        async def work(name):
            ran.append(name)

        doomed = asyncio.ensure_future(scheduler.run(1.0, lambda: work("doomed")))
        kept = asyncio.ensure_future(scheduler.run(2.0, lambda: work("kept")))
        await asyncio.sleep(0)
        doomed.cancel()
        release.set()
        await asyncio.gather(holder, kept)
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return ran, scheduler.busy, scheduler.waiting

    assert run(main()) == (["kept"], 0, 0)


def test_work_cancelled_by_its_caller_still_holds_the_slot_to_its_end():
    async def main():
        scheduler = DeadlineScheduler(1)
        finish = asyncio.Event()
        finished = []

        async def work():
            await finish.wait()
            finished.append(True)

        caller = asyncio.ensure_future(scheduler.run(0.0, work))
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        busy_while_running = scheduler.busy
        finish.set()
        await asyncio.sleep(0.01)
        return busy_while_running, finished, scheduler.busy

    assert run(main()) == (1, [True], 0)


def test_the_clock_counts_a_new_stream_as_starting_now_and_then_plays_in_real_time():
    now = [100.0]
    clock = PlaybackClock(1000, now=lambda: now[0])
    assert clock.deadline(500) == pytest.approx(100.0 + PLAYER_LEAD_S + 0.5)
    now[0] = 101.0
    assert clock.deadline(500) == pytest.approx(101.0 + PLAYER_LEAD_S + 0.5)  # not started: still now
    clock.start()
    now[0] = 105.0
    clock.start()  # only the first start counts
    assert clock.deadline(500) == pytest.approx(101.0 + PLAYER_LEAD_S + 0.5)
    clock.planned = 2000
    assert clock.deadline() == pytest.approx(101.0 + PLAYER_LEAD_S + 2.0)


def test_a_new_streams_first_chunk_overtakes_running_streams_ahead_of_their_listeners():
    """Four streams share one vocoder slot and are ahead of their listeners, each with
    calls queued, when a fifth arrives: its first chunk must be the next one vocoded,
    not the last of the queue."""
    frames = 64 * 8
    sentence = LatentSentence(0, whole_latent(np.zeros((2, frames), np.float32)))
    chunking = ChunkParams(8, 64, 0, 0)

    async def main():
        scheduler = DeadlineScheduler(1)
        order = []

        class Vocoder:
            def __init__(self, name):
                self.name = name

            async def vocode(self, window, urgent=False):
                order.append(self.name)
                await asyncio.sleep(0.002)
                return np.zeros(window.shape[1] * 256, np.float32)

        async def listen(name, going=None):
            async def one():
                yield sentence
            chunks = stream_pcm(one(), Vocoder(name), scheduler, chunking, PlaybackClock(22050))
            async for index, _ in aenumerate(chunks):
                if going and index == 1:
                    going.set()

        started = [asyncio.Event() for _ in range(4)]
        old = [asyncio.ensure_future(listen(f"old{i}", e)) for i, e in enumerate(started)]
        await asyncio.gather(*(e.wait() for e in started))
        queued_behind = scheduler.waiting
        before = len(order)
        await asyncio.gather(*old, listen("new"))
        return order, before, queued_behind

    order, before, queued_behind = run(main())
    assert queued_behind >= 3  # in arrival order the new stream would wait behind these
    assert order.index("new") <= before + 1, order  # only the call already running goes first


async def settle():
    """Let started calls reach their work (a few turns of the loop)."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_no_slot_is_left_free_while_calls_wait_whatever_their_deadlines():
    """Two slots: sentences synthesized ahead (due in 5 s) take both at once; a new
    stream's first chunk, due now, then waits for the first slot that frees, ahead of a
    call due later that came before it."""

    async def main():
        scheduler = DeadlineScheduler(2, now=lambda: 100.0)
        release = {name: asyncio.Event() for name in ("ahead1", "ahead2", "later", "first chunk")}
        started = []

        async def call(name, deadline):
            async def work():
                started.append(name)
                await release[name].wait()
            await scheduler.run(deadline, work)

        calls = [asyncio.ensure_future(call("ahead1", 105.0)), asyncio.ensure_future(call("ahead2", 105.0))]
        await settle()
        assert started == ["ahead1", "ahead2"] and scheduler.busy == 2
        calls.append(asyncio.ensure_future(call("later", 106.0)))
        await settle()
        calls.append(asyncio.ensure_future(call("first chunk", 100.05)))
        await settle()
        assert scheduler.waiting == 2
        release["ahead1"].set()
        await settle()
        assert started[2:] == ["first chunk"]
        for event in release.values():
            event.set()
        await asyncio.gather(*calls)
        return started[-1], scheduler.busy

    assert run(main()) == ("later", 0)


class Calls:
    """Calls held until released one by one, on a scheduler with a settable clock."""

    def __init__(self, slots: int) -> None:
        self.clock = [100.0]
        self.scheduler = DeadlineScheduler(slots, now=lambda: self.clock[0])
        self.tasks: list[tuple[asyncio.Task, asyncio.Event]] = []

    def start(self, client: str) -> asyncio.Event:
        release = asyncio.Event()
        task = asyncio.ensure_future(self.scheduler.for_client(client).run(0.0, release.wait))
        self.tasks.append((task, release))
        return release

    async def end(self, release: asyncio.Event) -> None:
        release.set()
        await settle()

    async def end_all(self) -> None:
        for task, release in self.tasks:
            release.set()
            await task


def test_a_client_active_lately_finds_its_share_of_the_slots_free():
    """Calls are not preempted, so a client speaking one sentence after another would
    wait for a greedy client's call each time. Its share of the slots is kept free for
    RECENT_S after its last call instead; a client alone takes every slot."""

    async def main():
        calls = Calls(2)
        scheduler = calls.scheduler
        greedy = [calls.start("greedy") for _ in range(4)]
        await settle()
        seen = [dict(scheduler.running)]  # alone: both slots
        normal = calls.start("normal")
        await settle()
        await calls.end(greedy[0])  # the freed slot goes to the newcomer
        seen.append(dict(scheduler.running))
        await calls.end(normal)  # its sentence is done; its share stays free
        seen.append((dict(scheduler.running), scheduler.waiting))
        normal = calls.start("normal")  # the next sentence starts at once
        await settle()
        seen.append(dict(scheduler.running))
        await calls.end(normal)
        calls.clock[0] += RECENT_S + 1  # the normal client has gone quiet
        await calls.end(greedy[1])
        seen.append(dict(scheduler.running))  # the greedy client has both slots again
        await calls.end_all()
        return seen

    assert run(main()) == [
        {"greedy": 2}, {"greedy": 1, "normal": 1}, ({"greedy": 1}, 2), {"greedy": 1, "normal": 1}, {"greedy": 2},
    ]


def test_anonymous_calls_keep_no_share_once_they_end():
    """The gateway's readiness probe names no client: a probe every few seconds must not
    halve a lone client's slots."""

    async def main():
        calls = Calls(2)
        probe = calls.start("")
        greedy = [calls.start("greedy") for _ in range(3)]
        await settle()
        during = dict(calls.scheduler.running)
        await calls.end(probe)
        after = dict(calls.scheduler.running)
        await calls.end_all()
        return during, after, greedy

    during, after, _ = run(main())
    assert during == {"": 1, "greedy": 1} and after == {"greedy": 2}


def test_a_call_that_borrows_runs_at_once_only_where_it_would_wait():
    """A first sentence's head is vocoded while the rest of its flow runs on the stream's
    slot: beside a greedy client the normal client's share is that one slot, so the call
    borrows it rather than wait for the flow to end; where a slot is free, it takes it."""

    async def main():
        calls = Calls(2)
        scheduler = calls.scheduler
        greedy = [calls.start("greedy") for _ in range(3)]
        await settle()
        reading = calls.start("normal")  # the normal client's flow, waiting for a slot
        await settle()
        await calls.end(greedy[0])  # and given the one freed: greedy has one running, one waiting
        normal = scheduler.for_client("normal")
        borrowed = await normal.run(0.0, lambda: asyncio.sleep(0, result=(dict(scheduler.running), scheduler.busy)),
                                    borrow=True)
        waited = asyncio.ensure_future(normal.run(0.0, lambda: asyncio.sleep(0, result="ran")))
        await settle()
        still_waiting = not waited.done()
        await calls.end(reading)
        await calls.end_all()
        return borrowed, still_waiting, await waited

    borrowed, still_waiting, waited = run(main())
    assert borrowed == ({"greedy": 1, "normal": 1}, 2)  # ran at once, holding no slot of its own
    assert still_waiting and waited == "ran"  # the same call without borrowing waits for a slot


def test_a_call_that_borrows_takes_a_free_slot_like_any_other():
    async def main():
        scheduler = DeadlineScheduler(2)
        return await scheduler.run(0.0, lambda: asyncio.sleep(0, result=scheduler.busy), "normal", borrow=True)

    assert run(main()) == 1


async def aenumerate(items):
    index = 0
    async for item in items:
        yield index, item
        index += 1


def test_the_slots_spare_are_those_free_while_no_call_waits():
    async def main():
        scheduler, release = DeadlineScheduler(3), asyncio.Event()
        spare = [scheduler.spare()]
        holders = [await occupy(scheduler, release)]
        spare.append(scheduler.for_client("a").spare())
        holders += [await occupy(scheduler, release) for _ in range(3)]  # the last waits
        spare.append(scheduler.spare())
        release.set()
        await asyncio.gather(*holders)
        return spare + [scheduler.spare()]

    assert run(main()) == [3, 2, 0, 3]


def test_an_urgent_call_runs_beside_the_calls_holding_every_slot_and_no_more_than_its_slots():
    async def main():
        scheduler, release = DeadlineScheduler(1, urgent_slots=1), asyncio.Event()
        holder = await occupy(scheduler, release)
        urgent = await scheduler.run(9.0, lambda: asyncio.sleep(0, result=scheduler.busy), urgent=True)
        lane = asyncio.ensure_future(scheduler.run(9.0, release.wait, urgent=True))  # takes the urgent slot
        await asyncio.sleep(0)
        late = [asyncio.ensure_future(scheduler.run(0.0, lambda: asyncio.sleep(0), urgent=u)) for u in (True, False)]
        await asyncio.sleep(0)
        waiting = scheduler.waiting
        release.set()
        await asyncio.gather(holder, lane, *late)
        return urgent, waiting, scheduler.busy

    # Ran at once on the second slot; then a second urgent call and a plain one both wait.
    assert run(main()) == (2, 2, 0)


def test_urgent_calls_are_not_let_past_the_slots_without_urgent_slots():
    async def main():
        scheduler, release = DeadlineScheduler(1), asyncio.Event()
        holder = await occupy(scheduler, release)
        urgent = asyncio.ensure_future(scheduler.run(0.0, lambda: asyncio.sleep(0), urgent=True))
        await asyncio.sleep(0)
        waited = not urgent.done()
        release.set()
        await asyncio.gather(holder, urgent)
        return waited

    assert run(main())


def test_an_urgent_call_passes_its_clients_share_by_the_urgent_slots():
    """A client alone holds every slot; its new stream's first packet still runs at once."""

    async def main():
        scheduler, release = DeadlineScheduler(2, urgent_slots=1), asyncio.Event()
        client = scheduler.for_client("a")
        holders = [asyncio.ensure_future(client.run(5.0, release.wait)) for _ in range(2)]
        await asyncio.sleep(0)
        busy = await client.run(0.0, lambda: asyncio.sleep(0, result=dict(scheduler.running)), urgent=True)
        release.set()
        await asyncio.gather(*holders)
        return busy

    assert run(main()) == {"a": 3}


def test_audio_is_urgent_when_its_listener_needs_it_within_urgent_s():
    now = [10.0]
    clock = PlaybackClock(22050, now=lambda: now[0])
    first = clock.deadline()  # nothing sent: due a player's lead from now
    clock.start()
    clock.planned = 22050  # a second planned
    assert clock.urgent(first) and not clock.urgent(clock.deadline())
    now[0] = clock.deadline() - URGENT_S / 2  # the listener has played nearly all of it
    assert clock.urgent(clock.deadline())
