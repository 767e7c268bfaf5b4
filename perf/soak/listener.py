"""The listeners: simulated users who speak random Harvard texts over protocol v1, hear the
audio in real time like a player, and sometimes cancel or vanish; each tells the tally."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import replace

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from perf.soak.tally import ABORTED, CANCELLED, COMPLETED, Failed, Failure, Heard, Tally
from perf.soak.utterance import Utterance
from perf.tools.workloads import harvard_sentences
from speechstream.client import Router, connection

PARAGRAPH_SENTENCES = 8  # as perf.tools.workloads' "paragraph"
LEAD_S = 1.0  # a player holds about a second of audio ahead of playback
STALL_S = 30.0  # no message for this long while waiting for one is a hang
DRAIN_S = 60.0  # after the soak, in-flight utterances must end within this
SENTENCES = harvard_sentences()


def random_text(rng: random.Random) -> str:
    """One Harvard sentence or eight consecutive ones, starting anywhere."""
    n = rng.choice((1, PARAGRAPH_SENTENCES))
    start = rng.randrange(len(SENTENCES) - n + 1)
    return " ".join(SENTENCES[start : start + n])


class Listener:
    """A simulated user: speaks, listens in real time, sometimes cancels or vanishes."""

    def __init__(self, url: str, rng: random.Random, tally: Tally, stopping: asyncio.Event, args: argparse.Namespace) -> None:
        self.url = url
        self.rng = rng
        self.tally = tally
        self.stopping = stopping
        self.args = args
        self.contexts = 0
        self.router = Router()  # the connection's; each connect() starts a fresh one

    async def run(self) -> None:
        ws: ClientConnection | None = None
        frame_s = 0.0
        while not self.stopping.is_set():
            if ws is None:
                ws, frame_s = await self.connect()
                continue
            try:
                outcome = await self.utterance(ws, frame_s)
            except Failure as e:
                self.tally.errors[e.kind] += 1
                self.tally.failures.append(e.failed)
                ws.transport.abort()  # the connection's state is unknown: start afresh
                ws = None
                await asyncio.sleep(1)  # as a client backs off before it tries again
                continue
            except ConnectionClosed as e:
                kind = f"connection_closed_{e.rcvd.code if e.rcvd else 'abnormally'}"
                self.tally.errors[kind] += 1
                self.tally.failures.append(replace(e.failed, kind=kind))
                ws = None
                continue
            outcome, resumed = outcome
            self.tally.utterances[outcome] += 1
            if resumed:
                self.tally.resumed[outcome] += 1
            if outcome == ABORTED:
                ws = None
        if ws is not None:
            await ws.close()

    async def connect(self) -> tuple[ClientConnection | None, float]:
        """A bare connection, read message by message: the listener paces its reading like
        a player and checks each routed event against protocol v1 itself."""
        self.router = Router()
        try:
            async with asyncio.timeout(STALL_S):
                ws = await connection(self.url)
                ready = self.router.route(await ws.recv()).message
        except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as e:
            self.tally.errors[f"connect_failed_{type(e).__name__}"] += 1
            await asyncio.sleep(1)
            return None, 0.0
        return ws, ready["frame_ms"] / 1000

    def plan(self) -> tuple[str | None, float]:
        """Whether to cancel or abort this utterance, and when (seconds after `speak`)."""
        roll, at = self.rng.random(), self.rng.uniform(0.2, 3.0)
        if roll < self.args.cancel:
            return CANCELLED, at
        if roll < self.args.cancel + self.args.abort:
            return ABORTED, at
        return None, 0.0

    async def utterance(self, ws: ClientConnection, frame_s: float) -> tuple[str, bool]:
        """How it ended, and whether it was resumed; Failure or ConnectionClosed (with
        `failed` set) when it failed."""
        self.contexts += 1
        u = Utterance(f"u{self.contexts}", frame_s)
        action, at = self.plan()
        spoken = time.monotonic()
        trigger = spoken + at
        try:
            await ws.send(json.dumps({"type": "speak", "context_id": u.context_id, "text": random_text(self.rng)}))
            while True:
                now = time.monotonic()
                if self.stopping.is_set():
                    action = None  # drain: read the rest at full speed
                if action and now >= trigger:
                    u.stop(now)
                    if action == ABORTED:
                        ws.transport.abort()  # vanish: no close handshake
                        return ABORTED, u.resumings > 0
                    await ws.send(json.dumps({"type": "cancel", "context_id": u.context_id}))
                    u.cancel_sent, action = True, None
                outcome = await self.step(ws, u, trigger - now if action else STALL_S)
                if outcome:
                    if outcome == COMPLETED and not self.stopping.is_set():
                        await asyncio.sleep(max(0.0, u.ahead(time.monotonic())))  # the player finishes
                    return outcome, u.resumings > 0
        except (Failure, ConnectionClosed) as e:
            now = time.monotonic()
            u.stop(now)  # the listener heard nothing more
            e.failed = Failed(getattr(e, "kind", ""), round(spoken - self.tally.start, 3), round(now - self.tally.start, 3),
                              u.next_seq > 0, u.resumings > 0)
            raise
        finally:
            self.tally.audio_s += u.audio_s
            if u.within_s is not None:
                self.tally.resume_bound_s = max(self.tally.resume_bound_s or 0.0, u.within_s)
            self.tally.stalls += [Heard(round(s.at - self.tally.start, 3), round(s.seconds, 3), resumed)
                                  for s, resumed in u.stalls]

    async def step(self, ws: ClientConnection, u: Utterance, until_trigger: float) -> str | None:
        """Wait like a player with a full buffer, or take one message; None if nothing ended."""
        wait = u.ahead(time.monotonic()) - LEAD_S
        if wait > 0 and not self.stopping.is_set():
            await asyncio.sleep(min(wait, until_trigger))
            return None
        timeout = min(STALL_S, until_trigger)
        try:
            message = await asyncio.wait_for(ws.recv(), timeout)  # recv is cancel-safe
        except TimeoutError:
            if timeout == STALL_S:
                raise Failure("stalled") from None
            return None
        try:
            event = self.router.route(message)
        except ValueError:
            raise Failure("malformed_message") from None
        return u.handle(event)


async def run_listeners(url: str, n: int, seconds: float, args: argparse.Namespace, tally: Tally) -> Tally:
    """`n` listeners for `seconds`, then let in-flight utterances finish."""
    stopping = asyncio.Event()

    async def start(i: int) -> None:
        await asyncio.sleep(i * 0.2)  # stagger, so utterances do not start in lockstep
        await Listener(url, random.Random(args.seed * 1000 + i), tally, stopping, args).run()

    tasks = [asyncio.create_task(start(i)) for i in range(n)]
    await asyncio.sleep(seconds)
    stopping.set()
    done, pending = await asyncio.wait(tasks, timeout=DRAIN_S)
    if pending:
        tally.errors["drain_timeout"] += len(pending)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        if task.exception() is not None:
            raise task.exception()
    return tally
