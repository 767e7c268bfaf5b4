"""Soak: mixed WebSocket load at about half of capacity; errors, leaks and memory growth.

    python -m perf.soak --duration 600
    python -m perf.soak --duration 600 --chaos vocoder  # and a stage fault every 60 s: vocoder, tts or all

Starts its own tritonserver and gateway on free loopback ports. A short calibration
(concurrent `speak`s read as fast as possible) measures capacity C in audio-seconds per
wall second; then round(C / 2) listeners (or --clients) each speak random Harvard texts
(one sentence, or eight as in the "paragraph" workload) over protocol v1 and consume the
audio in real time like a player, so each is a load of 1 audio-s/s. Per utterance a
listener may cancel it or drop its TCP connection without a close handshake, then
reconnect. Each listener's player (perf.playback's model) counts its stalls: the times it
had nothing to play once playing. Afterwards it reports errors, stalls (how many, how many
over 1.5 s, the longest), tts requests Triton still holds, shared-memory
segments left in /dev/shm, the resident memory growth of the gateway and of Triton (with
its Python backend stubs) after warm-up, and whether Triton then stops cleanly; as a
Markdown table on stdout and as soak.json and soak.md in --out, exiting with 1 when a
goal of zero (errors, leaks) is missed. --duration bounds calibration plus soak (600 s
at most); start-up and shut-down add half a minute to a minute.

With --chaos SET, Triton runs supervised as under speechstream-serve, and every
--fault-every seconds a stage fault of perf.chaos.FAULT_SETS[SET] strikes in turn:
`vocoder`, a vocoder stub killed or stopped for 3 s, which the failover hides (goal: no
error, no stall over 1.5 s); `tts`, the tts stub, the acoustic stub or tritonserver
killed, which the gateway resumes from (goal: every stream done, those it resumed within
its bound; an error after `resuming` is reported as such); `all` (--chaos alone), each of
the five in turn. Every error counts; a stream that hangs (no message for 30 s) counts as
hung. Streams end done (of them, resumed: a `resuming` came), errored or hung. Stalls are
also counted around the faults (those under way within AROUND_S after one) and elsewhere.
It reports each fault's recovery time (until a new utterance is spoken whole) and longest
stall, in soak-chaos-SET.json and .md (soak-chaos.* for `all`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import psutil
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from client.speech import Event, Router, SpeechClient, connection
from perf.chaos import FAULT_SETS, Fault, inject
from perf.playback import Player, Stall
from perf.servers import Servers, triton_metrics
from perf.workloads import harvard_sentences
from contract.models import TTS_ACTIVE_METRIC
from operations.shared_memory import SHM
from tests.processes import shm_mapped_by
from contract import protocol as v1

MAX_DURATION_S = 600.0
MIN_DURATION_S = 30.0
RESULTS = Path(__file__).parent / "results"
PARAGRAPH_SENTENCES = 8  # as perf.workloads' "paragraph"
PENDING_METRIC = "nv_inference_pending_request_count"

LEAD_S = 1.0  # a player holds about a second of audio ahead of playback
STALL_S = 30.0  # no message for this long while waiting for one is a hang
DRAIN_S = 60.0  # after the soak, in-flight utterances must end within this
SETTLE_S = 20.0  # after the load, the server must return to idle within this
SAMPLE_S = 2.0  # memory sampling interval
RSS_WINDOW_S = 10.0  # RSS is the median of the samples in a window this long
READY_S = 120.0  # after a chaos run, Triton must be ready again within this
HANGS = {"stalled", "drain_timeout"}  # what a hang is
LONG_STALL_S = 1.5  # a stall the listener notices as a break: goal 0 with no fault the failover can't hide
AROUND_S = 20.0  # a stall under way within this after a fault is one around it
LISTED_STALL_S = 0.25  # the results list each stall at least this long

COMPLETED, CANCELLED, ABORTED = "completed", "cancelled", "aborted"
SENTENCES = harvard_sentences()


@dataclass(frozen=True)
class Heard:
    """A stall of a listener's player, on the load's clock."""

    at_s: float  # since the load started
    seconds: float
    resumed: bool  # a `resuming` came during it: the gap a resume left


@dataclass(frozen=True)
class Failed:
    """An utterance that failed (an error, a hang, a dropped connection), on the load's clock."""

    kind: str
    spoken_at_s: float  # its `speak` sent
    at_s: float  # the failure
    audio: bool  # a frame of it had come
    resumed: bool  # a `resuming` had come


@dataclass
class Tally:
    """What the listeners saw, all of them together."""

    utterances: Counter = field(default_factory=Counter)  # by outcome
    errors: Counter = field(default_factory=Counter)  # by kind
    resumed: Counter = field(default_factory=Counter)  # utterances done after a `resuming`, by outcome
    failures: list[Failed] = field(default_factory=list)
    stalls: list[Heard] = field(default_factory=list)
    resume_bound_s: float | None = None  # the `resuming`s' within_ms, the longest
    audio_s: float = 0.0
    start: float = field(default_factory=time.monotonic)  # when the load started


class Failure(Exception):
    """An utterance went wrong in a way the server is to blame for."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind
        self.failed: Failed | None = None  # set by Listener.utterance


def random_text(rng: random.Random) -> str:
    """One Harvard sentence or eight consecutive ones, starting anywhere."""
    n = rng.choice((1, PARAGRAPH_SENTENCES))
    start = rng.randrange(len(SENTENCES) - n + 1)
    return " ".join(SENTENCES[start : start + n])


def log_errors(path: Path, offset: int) -> int:
    """Error lines after `offset` (start-up warns of the missing GPU): Python's ' ERROR ' and
    tracebacks, glog's 'E0123 '."""
    with path.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    return sum(" ERROR " in l or l.startswith("Traceback") or (l[:1] == "E" and l[1:5].isdigit()) for l in lines)


# --- measurements ----------------------------------------------------------------


def rss(processes: list[psutil.Process]) -> int:
    total = 0
    for proc in processes:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


Sample = tuple[float, int, int, float | None, float]  # s since soak start, gateway RSS, Triton RSS, active tts, load


async def monitor(servers: Servers, start: float, samples: list[Sample]) -> None:
    """Append a Sample every SAMPLE_S; the gauge too, to show it moves under load."""
    gateway = psutil.Process(servers.gateway.pid)
    while True:
        try:
            active = (await asyncio.to_thread(triton_metrics, servers.metrics_port)).get(TTS_ACTIVE_METRIC)
        except OSError:  # Triton restarting (--chaos)
            active = None
        triton = servers.triton_tree()
        if triton:  # not while Triton is gone (--chaos)
            samples.append((round(time.monotonic() - start, 1), rss([gateway]), rss(triton), active,
                            os.getloadavg()[0]))  # the host is shared: what else ran shows in its load
        await asyncio.sleep(SAMPLE_S)


def window_median(samples: list[Sample], column: int, start: float) -> float:
    """Median over [start, start + RSS_WINDOW_S): one sample catches transient buffers."""
    values = [s[column] for s in samples if start <= s[0] < start + RSS_WINDOW_S]
    return statistics.median(values or [samples[-1][column]])


def shm_entries() -> set[str]:
    return {entry.name for entry in SHM.iterdir()}


def shm_leaks(before: set[str]) -> tuple[list[str], list[str]]:
    """Entries new since `before` that no process maps: left by a process that is gone
    (the live Triton's are not leaks; what it leaves at its stop is counted then). Apart:
    POSIX semaphores (sem.*), which the Piper family's stubs never make but vLLM's engines
    (the AR family, in other tests on a shared host) do."""
    left = sorted(shm_entries() - before - shm_mapped_by(psutil.pids()))
    return [n for n in left if not n.startswith("sem.")], [n for n in left if n.startswith("sem.")]


async def settle(metrics_port: int) -> dict[str, float | None]:
    """Poll until Triton holds no tts or pending requests, or SETTLE_S passes; the last values."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        m = await asyncio.to_thread(triton_metrics, metrics_port)
        active, pending = m.get(TTS_ACTIVE_METRIC), m.get(PENDING_METRIC, 0.0)
        if (not active and not pending) or time.monotonic() > deadline:
            return {"active": active, "pending": pending}
        await asyncio.sleep(0.5)


# --- load ------------------------------------------------------------------------


async def calibrate(url: str, seconds: float, streams: int, rng: random.Random) -> float:
    """Audio-seconds per wall second with `streams` concurrent speaks read as fast as possible."""
    received = 0.0

    async def stream(r: random.Random) -> None:
        nonlocal received
        client = await SpeechClient.connect(url)
        frame_s = client.ready["frame_ms"] / 1000
        try:
            while True:
                async for _ in client.speak(random_text(r)):
                    received += frame_s
        finally:
            client.ws.transport.abort()  # a close handshake would wait behind unread audio

    tasks = [asyncio.create_task(stream(random.Random(rng.random()))) for _ in range(streams)]
    # The first quarter warms up (first inferences are slow) and is not counted.
    await asyncio.wait(tasks, timeout=seconds / 4, return_when=asyncio.FIRST_EXCEPTION)
    start, before = time.monotonic(), received
    done, _ = await asyncio.wait(tasks, timeout=seconds * 3 / 4, return_when=asyncio.FIRST_EXCEPTION)
    capacity = (received - before) / (time.monotonic() - start)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if done:  # the streams loop until cancelled: a finished one failed
        raise RuntimeError(f"calibration failed: {done.pop().exception()!r}")
    return capacity


@dataclass
class Utterance:
    """One context's events (routed by client.speech), checked against protocol v1, and
    its player."""

    context_id: str
    frame_s: float
    opened: bool = False  # its audio_start came
    next_seq: int = 0
    last_frame: bool = False
    done: bool = False
    cancel_sent: bool = False
    audio_s: float = 0.0
    resumings: int = 0  # `resuming` messages: the gateway issues the rest again
    within_s: float | None = None  # their bound
    player: Player = field(default_factory=Player)
    stalls: list[tuple[Stall, bool]] = field(default_factory=list)  # each, and whether a `resuming` came during it
    _resumings_heard: int = 0  # `resuming`s before the last frame

    def ahead(self, now: float) -> float:
        """Audio received but not yet played (below 0 while the player stalls)."""
        return self.player.ahead(now)

    def stop(self, now: float) -> None:
        """The listener stops playing (it cancels, vanishes, or the stream failed): a
        stall under way counts until now."""
        if stall := self.player.stop(now):
            self.stalls.append((stall, self.resumings > self._resumings_heard))

    def handle(self, event: Event) -> str | None:
        """The outcome once the context has ended, else None; Failure if the server errs."""
        if event.context_id != self.context_id:
            raise Failure("stray_frame" if event.frame else f"foreign_{event.kind}")
        if event.frame:
            self.frame(event.frame)
            return None
        kind, m = event.kind, event.message
        if kind == "audio_start" and not self.opened:
            self.opened = True
        elif kind == "done" and not self.done:
            if not self.last_frame:
                raise Failure("done_without_last_frame")
            self.done = True
            return None if self.cancel_sent else COMPLETED  # a cancel in flight still gets an answer
        elif kind == "cancelled" and self.cancel_sent:
            return COMPLETED if self.done else CANCELLED
        elif kind == "resuming" and not self.done and not self.last_frame:
            self.resumings += 1  # the frames go on, seq and offsets continuing
            if isinstance(m.get("within_ms"), (int, float)):
                self.within_s = max(self.within_s or 0.0, m["within_ms"] / 1000)
        elif kind == "error" and self.done and self.cancel_sent and m.get("code") == v1.UNKNOWN_CONTEXT:
            return COMPLETED  # the cancel arrived after the context had ended: a race, not a fault
        elif kind == "error":
            raise Failure(f"error_{m.get('code')}")
        else:
            raise Failure(f"unexpected_{kind}")
        return None

    def frame(self, frame: v1.AudioFrame) -> None:
        if self.last_frame:
            raise Failure("stray_frame")
        if frame.seq != self.next_seq:
            raise Failure("seq_out_of_order")
        self.next_seq += 1
        self.last_frame = frame.last
        if stall := self.player.arrive(time.monotonic(), self.frame_s):
            self.stalls.append((stall, self.resumings > self._resumings_heard))
        self._resumings_heard = self.resumings
        self.audio_s += self.frame_s


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


# --- the run ---------------------------------------------------------------------


def growth(samples: list[Sample], column: int, warmup_s: float, soak_s: float) -> dict[str, float]:
    """RSS after warm-up and at the end of the load (MiB), and the growth between them (%)."""
    start = window_median(samples, column, warmup_s)
    end = window_median(samples, column, max(warmup_s, soak_s - RSS_WINDOW_S))
    return {"after_warmup_mib": round(start / 2**20, 1), "end_mib": round(end / 2**20, 1),
            "growth_pct": round((end - start) * 100 / start, 2)}


async def soak(args: argparse.Namespace, servers: Servers) -> dict:
    shm_before = shm_entries()
    logs_before = {name: path.stat().st_size for name, path in servers.logs.items()}
    if TTS_ACTIVE_METRIC not in await asyncio.to_thread(triton_metrics, servers.metrics_port):
        print(f"warning: Triton exports no {TTS_ACTIVE_METRIC}; leaked tts requests cannot be counted")
    calibration_s = 0.0 if args.clients else min(25.0, 0.2 * args.duration)
    capacity = None
    if not args.clients:
        capacity = await calibrate(servers.url, calibration_s, args.calibration_streams, random.Random(args.seed))
    listeners = args.clients or max(1, round(capacity / 2))
    soak_s = args.duration - calibration_s
    warmup_s = min(0.2 * soak_s, 60.0)
    print(f"capacity: {'not measured' if capacity is None else f'{capacity:.1f} audio-s/s'}; "
          f"{listeners} listeners for {soak_s:.0f} s (warm-up {warmup_s:.0f} s)", flush=True)

    samples: list[Sample] = []
    sampler = asyncio.create_task(monitor(servers, time.monotonic(), samples))
    faults: list[Fault] = []
    tally = Tally()
    if args.chaos:
        servers.supervise()
        load_over = asyncio.Event()
        chaos = asyncio.create_task(
            inject(servers.triton, servers.url, args.fault_every, faults, load_over, args.chaos, tally.start))
        asyncio.get_running_loop().call_later(soak_s, load_over.set)  # no fault while the last utterances drain
    await run_listeners(servers.url, listeners, soak_s, args, tally)
    if sampler.done():  # it samples until cancelled: it failed, and its figures would be stale
        raise RuntimeError("the memory monitor stopped") from sampler.exception()
    sampler.cancel()
    if args.chaos:
        load_over.set()
        await chaos  # the last fault's recovery is measured to its end
        await ready_again(servers)
    after = await settle(servers.metrics_port)
    leaked_shm, others_shm = shm_leaks(shm_before)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(),
        "command": "python -m perf.soak " + " ".join(sys.argv[1:]),
        "seed": args.seed, "duration_s": args.duration, "calibration_s": calibration_s,
        "soak_s": soak_s, "warmup_s": round(warmup_s, 1),
        "capacity_audio_s_per_s": None if capacity is None else round(capacity, 2), "listeners": listeners,
        "utterances": {k: tally.utterances[k] for k in (COMPLETED, CANCELLED, ABORTED)},
        "audio_s": round(tally.audio_s, 1),
        "errors": tally.errors.total(), "errors_by_kind": dict(tally.errors),
        "streams": streams(tally, [f.at_s for f in faults]),
        "failures": failures(tally, [f.at_s for f in faults]),
        "stalls": stall_report(tally.stalls, [f.at_s for f in faults], tally.resume_bound_s),
        "chaos": chaos_report(faults, tally.stalls, args) if args.chaos else None,
        "leaked_tts_requests": after["active"], "pending_requests": after["pending"],
        "leaked_shm_segments": len(leaked_shm), "leaked_shm_names": leaked_shm,
        "semaphores_left_in_shm": others_shm,
        "gateway_rss": growth(samples, 1, warmup_s, soak_s), "triton_rss": growth(samples, 2, warmup_s, soak_s),
        "peak_active_tts_requests": max((s[3] for s in samples if s[3] is not None), default=None),
        "server_log_errors": {name: log_errors(path, logs_before[name]) for name, path in servers.logs.items()},
        "logs": {name: str(path) for name, path in servers.logs.items()},
        "host_load": {"median": statistics.median(s[4] for s in samples), "max": max(s[4] for s in samples)},
        "samples": samples,  # (s since soak start, gateway RSS, Triton tree RSS, active tts requests, 1-min load)
    }


async def ready_again(servers: Servers) -> None:
    """Wait until the supervisor has Triton serving again after the last fault."""
    deadline = time.monotonic() + READY_S
    while not (servers.triton.fault() is None and servers.triton.is_ready()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Triton not ready {READY_S:.0f} s after the chaos")
        await asyncio.sleep(1)


def streams(tally: Tally, fault_times: list[float] = ()) -> dict:
    """Utterances started, and how they ended: done (completed, cancelled or aborted by the
    listener; of them, resumed: told `resuming` on the way), errored (an error, a dropped
    connection), or hung. The errored by kind, and by when: cut by a fault (spoken before
    one, failed after it; of them, after `resuming`: past the gateway's bound), refused
    (spoken after a fault and failed before any audio: a new stream while a stage is down
    gets `backend_unavailable` at once), or other."""
    hung = sum(tally.errors[kind] for kind in HANGS)
    done = tally.utterances.total()
    errored = {kind: n for kind, n in tally.errors.items() if kind not in HANGS and not kind.startswith("connect_")}
    failed = [f for f in tally.failures if f.kind not in HANGS]
    cut = [cause(f, fault_times) == "cut" for f in failed]
    refused = sum(cause(f, fault_times) == "refused" for f in failed)
    return {"started": done + sum(errored.values()) + hung, "done": done, "resumed_done": tally.resumed.total(),
            "errored": sum(errored.values()), "errored_by_kind": errored,
            "errored_cut": sum(cut), "errored_cut_resumed": sum(f.resumed for f, c in zip(failed, cut) if c),
            "errored_refused": refused, "errored_other": sum(errored.values()) - sum(cut) - refused,
            "resumed_errored": sum(f.resumed for f in failed),
            "hung": hung, "resumed_hung": sum(f.resumed for f in tally.failures if f.kind in HANGS)}


def cause(failed: Failed, fault_times: list[float]) -> str:
    """cut (spoken before a fault, failed after it), refused (spoken after a fault, failed
    before any audio) or other."""
    if any(failed.spoken_at_s < at <= failed.at_s for at in fault_times):
        return "cut"
    return "refused" if fault_times and not failed.audio else "other"


def failures(tally: Tally, fault_times: list[float]) -> list[dict]:
    """Each failure but the refused (a new stream while a stage is down: many, all alike),
    with its cause."""
    return [asdict(f) | {"cause": c} for f in tally.failures if (c := cause(f, fault_times)) != "refused"]


def around(stall: Heard, fault_at: float) -> bool:
    """Whether a stall was under way within AROUND_S after a fault struck at `fault_at`."""
    return stall.at_s < fault_at + AROUND_S and stall.at_s + stall.seconds > fault_at


def stall_summary(stalls: list[Heard]) -> dict:
    return {"count": len(stalls), "over_1_5_s": sum(s.seconds > LONG_STALL_S for s in stalls),
            "longest_s": max((s.seconds for s in stalls), default=0.0)}


def stall_report(stalls: list[Heard], fault_times: list[float], resume_bound_s: float | None = None) -> dict:
    """The players' stalls: all, those around a fault (and elsewhere), those a resume left
    (a `resuming` came during them), and each at least LISTED_STALL_S long; with the
    gateway's resume bound (`within_ms` of the `resuming`s), if one came."""
    near = [any(around(s, at) for at in fault_times) for s in stalls]
    return {
        "all": stall_summary(stalls) | {"stalled_s": round(sum(s.seconds for s in stalls), 1)},
        "around_faults": stall_summary([s for s, n in zip(stalls, near) if n]),
        "elsewhere": stall_summary([s for s, n in zip(stalls, near) if not n]),
        "resumed": stall_summary([s for s in stalls if s.resumed]),
        "around_s": AROUND_S, "long_s": LONG_STALL_S, "resume_bound_s": resume_bound_s,
        "listed": [asdict(s) for s in sorted(stalls, key=lambda s: s.at_s) if s.seconds >= LISTED_STALL_S],
    }


def chaos_report(faults: list[Fault], stalls: list[Heard], args: argparse.Namespace) -> dict:
    recovered = [f.recovered_s for f in faults if f.recovered_s is not None]
    return {
        "set": args.chaos, "fault_every_s": args.fault_every,
        "faults": [asdict(f) | {"longest_stall_s": max((s.seconds for s in stalls if around(s, f.at_s)), default=0.0)}
                   for f in faults],
        "unrecovered": len(faults) - len(recovered),
        "recovery_s": {"median": statistics.median(recovered) if recovered else None, "max": max(recovered, default=None)},
    }


def table(r: dict) -> str:
    u, gw, tr, st, chaos = r["utterances"], r["gateway_rss"], r["triton_rss"], r["streams"], r["chaos"]
    which = chaos["set"] if chaos else None
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(r["errors_by_kind"].items()))
    active, peak = ("gauge absent" if v is None else f"{v:g}" for v in (r["leaked_tts_requests"], r["peak_active_tts_requests"]))
    capacity = "not measured" if r["capacity_audio_s_per_s"] is None else f"{r['capacity_audio_s_per_s']:.1f}"
    rows = [
        ("capacity (audio-s/s, calibration)", capacity, ""),
        ("listeners (1 audio-s/s each)", r["listeners"], "≈ capacity / 2"),
        ("duration s (calibration + soak; warm-up)", f"{r['calibration_s']:.0f} + {r['soak_s']:.0f}; {r['warmup_s']:.0f}", "≤ 600"),
        (f"host load (1-min load average, {r['cpus']} CPUs, shared): median / max during the load",
         f"{r['host_load']['median']:.1f} / {r['host_load']['max']:.1f}", ""),
        ("utterances completed / cancelled / aborted", f"{u[COMPLETED]} / {u[CANCELLED]} / {u[ABORTED]}", ""),
        ("streams started / done (of them resumed) / errored / hung",
         f"{st['started']} / {st['done']} ({st['resumed_done']}) / {st['errored']} / {st['hung']}",
         "0 errored, 0 hung" if which in (None, "vocoder") else "0 hung"),
    ]
    if chaos:
        rows.append(("errored: cut by a fault (of them after `resuming`) / refused, spoken after a fault, "
                     "before any audio / other", f"{st['errored_cut']} ({st['errored_cut_resumed']}) / "
                     f"{st['errored_refused']} / {st['errored_other']}", "0 / 0 / 0" if which == "vocoder" else "0 / – / 0"))
    if chaos:
        faults = "; ".join(f"{f['at_s']:.0f} s {f['name']}: {f['recovered_s']}, {f['longest_stall_s']:.2f}"
                           for f in chaos["faults"])
        rows += [
            (f"faults (`{which}`, one every {chaos['fault_every_s']:g} s): at, which, recovered after s, "
             "longest stall around it s", faults or "none", ""),
            ("recovery s: median / max; not recovered",
             f"{chaos['recovery_s']['median']} / {chaos['recovery_s']['max']}; {chaos['unrecovered']}",
             "≤ 10 (stub), ≤ 30 (tritonserver); 0"),
        ]
    rows += [
        *stall_table(r["stalls"], which),
        ("audio delivered (s)", f"{r['audio_s']:.0f}", ""),
        ("errors", f"{r['errors']}" + (f" ({kinds})" if kinds else ""), "0" if which in (None, "vocoder") else "0 but refused"),
        (f"`{TTS_ACTIVE_METRIC}`: peak during load / after it (leaked)", f"{peak} / {active}", "0 after"),
        (f"pending requests (`{PENDING_METRIC}`, all models)", f"{r['pending_requests']:g}", "0"),
        ("leaked /dev/shm segments (apart: POSIX semaphores, not the Piper family's, left by another process)",
         f"{r['leaked_shm_segments']}" + (f" (apart: {len(r['semaphores_left_in_shm'])})"
                                          if r.get("semaphores_left_in_shm") else ""), "0"),
        ("gateway RSS after warm-up → end (MiB)", f"{gw['after_warmup_mib']} → {gw['end_mib']}", ""),
        ("gateway RSS growth", f"{gw['growth_pct']:+.2f} %", "< 5 %"),
        ("Triton RSS, server + stubs, after warm-up → end (MiB)", f"{tr['after_warmup_mib']} → {tr['end_mib']}", ""),
        ("Triton RSS growth", f"{tr['growth_pct']:+.2f} %", "–, restarted" if chaos else "< 5 %"),
        ("error lines in server logs during the load (gateway / Triton)",
         f"{r['server_log_errors']['gateway']} / {r['server_log_errors']['triton']}", "0"),
        # A clean stop takes a few seconds; Triton gives up on unloading after 30.
        ("Triton shutdown after the load (s; exit code)", f"{r['triton_stop_s']}; {r['triton_exit_code']}", "< 30; 0"),
        ("Python backend stubs left running after Triton exits", r["stubs_left_running"], "0"),
        ("their /dev/shm segments left after Triton exits", r["shm_left_after_exit"], "0"),
    ]
    lines = ["| measure | value | goal |", "|---|---|---|"]
    return "\n".join(lines + [f"| {a} | {b} | {c} |" for a, b, c in rows])


def stall_table(st: dict, which: str | None) -> list[tuple[str, str, str]]:
    """The stall rows: goal 0 over 1.5 s but where a fault stops a stream until it is resumed."""
    def cells(part: dict) -> str:
        return f"{part['count']}; {part['over_1_5_s']}; {part['longest_s']:.2f}"

    long = f"{st['long_s']:g} s"
    goal = f"0 over {long}"
    hidden = which in (None, "vocoder")  # no fault that stops a stream until it is resumed
    rows = [(f"player stalls: count; over {long}; longest s (all streams, {st['all']['stalled_s']:g} s stalled in all)",
             cells(st["all"]), goal if hidden else "")]
    if which:
        rows += [
            (f"stalls around faults (under way within {st['around_s']:g} s after one): count; over {long}; longest s",
             cells(st["around_faults"]), goal if hidden else ""),
            (f"stalls elsewhere: count; over {long}; longest s", cells(st["elsewhere"]), goal),
        ]
    if which in ("tts", "all"):
        bound = f"≤ {st['resume_bound_s']:g}" if st["resume_bound_s"] else "≤ the bound"
        rows.append(("stalls across a `resuming` (the gap a resume left): count; longest s",
                     f"{st['resumed']['count']}; {st['resumed']['longest_s']:.2f}", f"–; {bound}"))
    return rows


def results_name(chaos: str | None) -> str:
    """soak, soak-chaos (every fault) or soak-chaos-SET."""
    return "soak" if not chaos else "soak-chaos" if chaos == "all" else f"soak-chaos-{chaos}"


def write(results: dict, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    name = results_name(results["chaos"] and results["chaos"]["set"])
    (out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    title = f"Soak with chaos ({results['chaos']['set']})" if results["chaos"] else "Soak"
    markdown = (
        f"# {title}\n\n{results['date']} on `{results['host']}` "
        f"({results['cpus']} CPUs), `{results['command']}`, seed {results['seed']}\n\n{table(results)}\n"
    )
    (out / f"{name}.md").write_text(markdown)
    return markdown


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m perf.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=MAX_DURATION_S, help="seconds of calibration + soak (≤ 600)")
    parser.add_argument("--clients", type=int, help="listeners; skips the calibration (default: capacity / 2)")
    parser.add_argument("--calibration-streams", type=int, default=8, help="concurrent speaks while calibrating")
    parser.add_argument("--cancel", type=float, default=0.15, help="probability that an utterance is cancelled")
    parser.add_argument("--abort", type=float, default=0.10, help="probability that a listener drops its connection")
    parser.add_argument("--chaos", nargs="?", const="all", choices=sorted(FAULT_SETS),
                        help="a stage fault every --fault-every s, Triton supervised: the vocoder's (failover), "
                        "the tts stage's (resumed), or all in turn (the default)")
    parser.add_argument("--fault-every", type=float, default=60.0, help="seconds between faults under --chaos")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="directory for soak.json and soak.md (soak-chaos[-SET].json and .md)")
    args = parser.parse_args(argv)
    if not MIN_DURATION_S <= args.duration <= MAX_DURATION_S:
        parser.error(f"--duration must be {MIN_DURATION_S:g} to {MAX_DURATION_S:g} s")
    return args


def main(argv: list[str] | None = None) -> int:
    """Exit status 1 when a goal of zero (errors, leaks) is missed."""
    args = parse_args(argv)
    # No admission: the calibration saturates the server on purpose, and the soak stays at half of it.
    servers = Servers(Path(tempfile.mkdtemp(prefix="soak-")), gateway_flags=(*Servers.ONE_ADDRESS, "--admission-load", "0"))
    print(f"logs: {servers.logs['gateway'].parent}", flush=True)
    try:
        servers.start()
        results = asyncio.run(soak(args, servers))
    finally:
        shutdown = servers.stop()
    results.update(shutdown)
    print(write(results, args.out))
    leaks = (results["leaked_tts_requests"] or 0) + results["pending_requests"] + results["leaked_shm_segments"]
    leaks += results["stubs_left_running"] + results["shm_left_after_exit"]
    unrecovered = results["chaos"]["unrecovered"] if results["chaos"] else 0
    return 1 if missed_errors_goal(results) or leaks or unrecovered or missed_stall_goal(results) else 0


def missed_errors_goal(results: dict) -> bool:
    """An error; where a fault needs a resume (tts, all), an error but a new stream's refusal
    while a stage was down."""
    if not results["chaos"] or results["chaos"]["set"] == "vocoder":
        return results["errors"] > 0
    st = results["streams"]
    return results["errors"] > st["errored_refused"] or st["hung"] > 0


def missed_stall_goal(results: dict) -> bool:
    """A stall over 1.5 s where no fault needs a resume (no chaos, or the vocoder's); past
    the resume bound where one does."""
    which, st = results["chaos"] and results["chaos"]["set"], results["stalls"]
    if which in (None, "vocoder"):
        return st["all"]["over_1_5_s"] > 0
    past_bound = bool(st["resume_bound_s"]) and st["resumed"]["longest_s"] > st["resume_bound_s"]
    return past_bound or st["elsewhere"]["over_1_5_s"] > 0


if __name__ == "__main__":
    sys.exit(main())
