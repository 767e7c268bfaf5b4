"""Stage calls of all streams, most urgent first.

A stage has a fixed number of instances. If every stream sent its calls as soon as it
could, a stream seconds ahead of its listener would queue in front of a new stream's
first chunk, or of one about to stall. So calls wait here instead, for a free slot
(`tts`'s `slots`, one more than the cores by default: on a CPU both stages share the
cores, so their calls share the slots), and the free slot goes to the call with the earliest
deadline: the time its stream's listener will need the audio. Triton 2.51's BLS cannot
give a request a priority, so the order is kept here rather than in Triton's queue.

A free slot is never left idle while a call waits, even one far from its deadline (a
sentence synthesized ahead): a slot kept free for calls due soon leaves a core idle
whenever every stream is ahead, and the calls put off then pile up near their
deadlines: less throughput and more stalls (docs/design.md, Deadline scheduling).

Deadlines alone are unfair above capacity: streams that fell behind have the earliest
deadlines, so one client with many streams would starve a newcomer. So a free slot goes
first to the client (an opaque name the gateway gives each request: its address) with
the fewest calls running, and only then to the earliest deadline among its calls.

That alone still makes a newcomer wait for a greedy client's call to end. So while
several clients have been active lately (within RECENT_S), each may hold only its share
of the slots (slots // clients, at least one), and the client that comes back finds its
share free; a client alone may hold them all. Anonymous calls (no client named: the
gateway's readiness probe, direct Triton users) count only while they run or wait, so a
probe every few seconds does not halve a lone client's slots.

Calls are not preempted, so a new stream's first packet would wait for a call in
flight, up to a long sentence's flow or a grown chunk's window. So an urgent call (its
listener needs it within URGENT_S: a first or second packet, or a listener about to run dry) may
run beside the calls that hold the slots, on up to `urgent_slots` more: the stages
compute it above the others (python_backends.priority), so the kernel gives it a core
at once and the calls it overtook lose only its own time.

Pure asyncio, no Triton: the tts model owns one scheduler for both stages.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from contract.models import PLAYER_LEAD_S
from python_backends.capacity import CapacityMeter

T = TypeVar("T")

# A client that called within this long still has its share of the slots kept for it.
RECENT_S = 5.0
# A call whose listener needs it within this long is urgent: a new stream's first
# packet (due PLAYER_LEAD_S after its request), its second (due PLAYER_LEAD_S and the
# default first chunk's 93 ms after the first audio: waiting for a slot behind the calls
# in flight, it came late), or a listener about to run dry.
URGENT_S = 0.2


class Scheduler(Protocol):
    """What a stream needs of a scheduler: run a call when it is granted a slot; or, with
    `borrow`, at once where it has not been granted one (see DeadlineScheduler.run)."""

    async def run(self, deadline: float, work: Callable[[], Awaitable[T]], borrow: bool = False,
                  urgent: bool = False) -> T: ...

    def spare(self) -> int:
        """Slots free with no call waiting for them: cores a call running now may use
        beside its own, until another call comes."""
        ...


@dataclass
class _Waiter:
    deadline: float
    urgent: bool
    arrival: int
    client: str
    granted: asyncio.Future  # set when the slot is handed over


class DeadlineScheduler:
    """Runs calls on `slots` slots: a free slot goes to the client with the fewest calls
    running, then to its earliest deadline; ties go in arrival order. A client holds no
    more than its share while others have been active lately. Urgent calls may run on
    `urgent_slots` more."""

    def __init__(
        self, slots: int, cores: int | None = None, urgent_slots: int = 0, now: Callable[[], float] = time.monotonic,
    ) -> None:
        """`cores`: what the calls share (default `slots`); the capacity is measured on
        no more of them than there are slots."""
        if slots < 1:
            raise ValueError(f"slots must be at least 1, not {slots}")
        self.slots, self.urgent_slots = slots, urgent_slots
        self.meter = CapacityMeter(min(slots, cores or slots), now=now)
        self.busy = 0
        self.running: Counter[str] = Counter()  # calls running, by client
        self._last_call: dict[str, float] = {}  # when each client last asked for a slot
        self._now = now
        self._waiting: list[_Waiter] = []
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot."""
        return sum(not w.granted.done() for w in self._waiting)

    def for_client(self, client: str) -> ClientScheduler:
        """This scheduler as one client's calls see it."""
        return ClientScheduler(self, client)

    async def run(
        self, deadline: float, work: Callable[[], Awaitable[T]], client: str = "", borrow: bool = False,
        urgent: bool = False,
    ) -> T:
        """Wait for a slot, then run `work()` holding it. Once started, the work runs to
        its end and holds the slot until then even if the caller is cancelled: Triton
        cannot take back a request it was sent, so the instance stays busy anyway.

        `borrow`: the caller's own stream holds a slot for work that overlaps this call
        (a first sentence's flow still running while its head is vocoded). Where no slot
        is free for it now, the call runs at once on that slot rather than wait for
        another: so a stream's first packet keeps the overlap an idle machine gives it,
        even when its client's share is a single slot. At most one such call runs per
        slot held, so the cores are oversubscribed by no more than the slots.

        `urgent`: the call may start on one of the `urgent_slots` while the others are
        held (the caller computes it above them)."""
        if borrow and (self._waiting or not self._may_start(client, self.share(), urgent)):
            return await work()
        await self._acquire(deadline, client, urgent)
        try:
            task = asyncio.ensure_future(work())
        except BaseException:
            self._release(client)
            raise
        task.add_done_callback(lambda _: self._release(client))
        return await asyncio.shield(task)

    def spare(self) -> int:
        return 0 if self.waiting else max(self.slots - self.busy, 0)

    def share(self) -> int:
        """Slots one client may hold: an even split among the clients active lately."""
        now = self._now()
        self._last_call = {c: t for c, t in self._last_call.items() if now - t <= RECENT_S}
        active = self._last_call.keys() | self.running.keys() | {w.client for w in self._waiting}
        return max(1, self.slots // max(1, len(active)))

    def _may_start(self, client: str, share: int, urgent: bool = False) -> bool:
        extra = self.urgent_slots if urgent else 0
        return self.busy < self.slots + extra and self.running[client] < share + extra

    async def _acquire(self, deadline: float, client: str, urgent: bool) -> None:
        if client:
            self._last_call[client] = self._now()
        self._hand_over()  # waiters whose client's share came free meanwhile go first
        if not self._waiting and self._may_start(client, self.share(), urgent):
            self._start(client)
            return
        waiter = _Waiter(deadline, urgent, next(self._arrivals), client, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        self._hand_over()
        try:
            await waiter.granted  # the slot is handed over with the result
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self._release(client)  # handed a slot, then cancelled before using it
            raise

    def _start(self, client: str) -> None:
        self.busy += 1
        self.running[client] += 1
        self.meter.running(self.busy)

    def _release(self, client: str) -> None:
        self.busy -= 1
        self.meter.running(self.busy)
        self.running[client] -= 1
        if not self.running[client]:
            del self.running[client]
        self._hand_over()

    def _hand_over(self) -> None:
        """Give free slots to the waiters first in line among those that may start now:
        fewest calls running for their client, then earliest deadline."""
        self._waiting = [w for w in self._waiting if not w.granted.done()]  # drop the cancelled
        while self.busy < self.slots + self.urgent_slots:
            share = self.share()
            ready = [w for w in self._waiting if self._may_start(w.client, share, w.urgent)]
            if not ready:
                return
            first = min(ready, key=lambda w: (self.running[w.client], w.deadline, w.arrival))
            self._waiting.remove(first)
            self._start(first.client)
            first.granted.set_result(None)


@dataclass(frozen=True)
class ClientScheduler:
    """A DeadlineScheduler's `run` for one client's calls."""

    scheduler: DeadlineScheduler
    client: str

    async def run(
        self, deadline: float, work: Callable[[], Awaitable[T]], borrow: bool = False, urgent: bool = False,
    ) -> T:
        return await self.scheduler.run(deadline, work, self.client, borrow, urgent)

    def spare(self) -> int:
        return self.scheduler.spare()


class Streams:
    """Requests being served now, each with its client (the load that sizes a stream's
    first chunk) and its playback clock (whether it has sent audio yet)."""

    def __init__(self) -> None:
        self._clients: dict[PlaybackClock, str] = {}  # by each stream's clock

    @property
    def by_client(self) -> Counter[str]:
        """Streams being served, by client."""
        return Counter(self._clients.values())

    @property
    def silent(self) -> int:
        """Streams whose first audio has not gone out: the streams starting."""
        return sum(clock.started is None for clock in self._clients)

    @contextlib.contextmanager
    def serving(self, client: str, clock: PlaybackClock) -> Iterator[None]:
        self._clients[clock] = client
        try:
            yield
        finally:
            del self._clients[clock]

    def ahead_of(self, clock: PlaybackClock, lead_s: float) -> bool:
        """Whether every stream but `clock`'s has sent audio and is at least `lead_s` of
        audio ahead of its listener: then a newcomer's small calls, which go first, delay
        no listener's audio."""
        return all(c is clock or (c.started is not None and c.ahead_s() >= lead_s) for c in self._clients)

    def over_share(self, client: str, share: int) -> bool:
        """Whether `client` has more streams than `share`, its share of the slots
        (DeadlineScheduler.share): then its first chunks wait for a slot anyway, and are
        better sized for throughput."""
        return self.by_client[client] > share


@dataclass(eq=False)
class PlaybackClock:
    """When a stream's listener will need each of its samples.

    Playback starts PLAYER_LEAD_S after the first chunk is sent and runs in real time.
    Until then the stream counts as starting now, so a new stream is the most urgent.
    """

    rate: int
    started: float | None = None
    planned: int = 0  # samples whose synthesis is planned so far (a lower bound on what comes)
    now: Callable[[], float] = field(default=time.monotonic, repr=False)
    _sounded: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def start(self) -> None:
        """The first chunk is being sent."""
        if self.started is None:
            self.started = self.now() + PLAYER_LEAD_S
            self._sounded.set()

    async def first_audio(self) -> None:
        """Return once the first chunk has been sent (`start`)."""
        await self._sounded.wait()

    def urgent(self, deadline: float) -> bool:
        """Whether the listener needs audio due at `deadline` within URGENT_S."""
        return deadline - self.now() <= URGENT_S

    def ahead_s(self) -> float:
        """The audio planned so far that the listener has not reached yet, in seconds:
        how long the next call may take before the player runs dry."""
        return self.deadline() - self.now()

    def deadline(self, sample: int | None = None) -> float:
        """When sample `sample` (default: the first one not planned yet) will be played."""
        sample = self.planned if sample is None else sample
        start = self.started if self.started is not None else self.now() + PLAYER_LEAD_S
        return start + sample / self.rate

