"""The report: the results as a Markdown table beside their goals, written with the JSON
to the results directory."""

from __future__ import annotations

import json
from pathlib import Path

from contract.models import TTS_ACTIVE_METRIC
from perf.soak.monitor import PENDING_METRIC
from perf.soak.tally import ABORTED, CANCELLED, COMPLETED


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
