"""The results' summaries of what the listeners saw: how streams ended and why they
failed, the players' stalls, around the faults and elsewhere, and each fault's recovery."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict

from perf.soak.chaos import Fault
from perf.soak.tally import ABORTED, CANCELLED, COMPLETED, Failed, Heard, Tally

HANGS = {"stalled", "drain_timeout"}  # what a hang is
LONG_STALL_S = 1.5  # a stall the listener notices as a break: goal 0 with no fault the failover can't hide
AROUND_S = 20.0  # a stall under way within this after a fault is one around it
LISTED_STALL_S = 0.25  # the results list each stall at least this long


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


def heard(tally: Tally, faults: list[Fault], args: argparse.Namespace) -> dict:
    """The results' part on what the listeners heard."""
    fault_times = [f.at_s for f in faults]
    return {
        "utterances": {k: tally.utterances[k] for k in (COMPLETED, CANCELLED, ABORTED)},
        "audio_s": round(tally.audio_s, 1),
        "errors": tally.errors.total(), "errors_by_kind": dict(tally.errors),
        "streams": streams(tally, fault_times),
        "failures": failures(tally, fault_times),
        "stalls": stall_report(tally.stalls, fault_times, tally.resume_bound_s),
        "chaos": chaos_report(faults, tally.stalls, args) if args.chaos else None,
    }
