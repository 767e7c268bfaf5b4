"""Stage faults for `python -m perf.soak --chaos [SET]`: at a fixed interval, the next fault
of a set of FAULT_SETS, in turn, against a supervised Triton (speechstream-serve's
supervisor, run by operations.loopback); then how long until a new utterance is spoken whole again.

The sets: `vocoder`, the faults the vocoder's failover hides (a stream in flight goes on,
no error); `tts`, the faults of the stage a stream is synthesized by (the `tts` model, a
stage it calls alone, tritonserver), which the gateway resumes from (`resuming`, then the
rest of the audio, within its bound); `all`, every fault in turn."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from dataclasses import asdict, dataclass

from websockets.exceptions import WebSocketException

from operations.supervisor import TritonServer
from speechstream.client import SpeechClient, SpeechError

# (name, the model whose stub it hits or None for tritonserver, the signal, seconds stopped)
FAULTS = (
    ("kill vocoder stub", "vocoder", signal.SIGKILL, 0.0),
    ("kill acoustic stub", "acoustic", signal.SIGKILL, 0.0),
    ("stop vocoder stub for 3 s", "vocoder", signal.SIGSTOP, 3.0),
    ("kill tts stub", "tts", signal.SIGKILL, 0.0),
    ("kill tritonserver", None, signal.SIGKILL, 0.0),
)
FAULT_SETS = {
    "vocoder": (FAULTS[0], FAULTS[2]),
    "tts": (FAULTS[3], FAULTS[1], FAULTS[4]),
    "all": FAULTS,
}
RECOVERY_LIMIT_S = 60.0  # past this, the fault counts as not recovered
PROBE_TEXT = "Are you back?"


@dataclass
class Fault:
    at_s: float  # since the load started
    name: str
    pid: int
    recovered_s: float | None = None  # fault → the first new utterance spoken whole


def inflict(triton: TritonServer, model: str | None, sig: signal.Signals) -> int:
    """Send `sig` to the stub that runs `model` (or to tritonserver); its pid."""
    pid = triton.process.pid if model is None else triton.stub(model).pid
    os.kill(pid, sig)
    return pid


async def spoken(url: str) -> bool:
    """Whether a new utterance is spoken whole now (within 10 s)."""
    try:
        async with asyncio.timeout(10):
            client = await SpeechClient.connect(url)
            try:
                return [frame async for frame in client.speak(PROBE_TEXT)] != []
            finally:
                await client.close()
    except (SpeechError, OSError, TimeoutError, WebSocketException):
        return False


async def recovery(url: str, since: float) -> float | None:
    """Seconds from `since` until an utterance is spoken whole, None past the limit."""
    while time.monotonic() - since < RECOVERY_LIMIT_S:
        if await spoken(url):
            return round(time.monotonic() - since, 1)
        await asyncio.sleep(0.5)
    return None


async def inject(triton: TritonServer, url: str, every_s: float, faults: list[Fault], over: asyncio.Event,
                 which: str = "all", start: float | None = None) -> None:
    """Every `every_s` from `start` (time.monotonic(); default now), the next fault of
    FAULT_SETS[which], and its recovery, appended to `faults`; returns once `over` is set
    (after the recovery under way)."""
    start = time.monotonic() if start is None else start
    kinds = FAULT_SETS[which]
    for n in itertools.count():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(over.wait(), every_s - (time.monotonic() - start) % every_s)
        if over.is_set():
            return
        name, model, sig, stopped_s = kinds[n % len(kinds)]
        at = time.monotonic()
        try:
            pid = await asyncio.to_thread(inflict, triton, model, sig)
        except (LookupError, ProcessLookupError) as e:  # Triton is still restarting from the last one
            print(f"chaos: {name} skipped: {e}", flush=True)
            continue
        fault = Fault(round(at - start, 1), name, pid)
        faults.append(fault)
        if stopped_s:
            await asyncio.sleep(stopped_s)
            with contextlib.suppress(ProcessLookupError):  # a stopped stub can crash Triton, which kills it
                os.kill(pid, signal.SIGCONT)
        fault.recovered_s = await recovery(url, at)
        print(f"chaos: {asdict(fault)}", flush=True)
