"""The benchmark's report: the goal checks (`perf.speech.goals`), a Markdown table, where the
time goes (`perf.speech.breakdown`) and two PNG plots, all from the results dictionary that
`perf.speech.bench` also writes as JSON, so a report can be redrawn from a bench.json without
measuring again:

    python -m perf.speech.report [DIR]       # DIR/bench.json → DIR/bench.md, ttfp.png, throughput.png
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from perf.speech.breakdown import section
from perf.speech.goals import OURS, at_level, efficiency, goals, rows_of
from perf.tools.plots import pyplot


def cpu_cell(cpu: dict) -> str:
    """Server CPU in cores (CPU s ÷ wall s): ours split into gateway + Triton."""
    if "gateway" in cpu:
        triton = f" + tr {cpu['triton']['cores']:.2f}" if "triton" in cpu else ""
        return f"gw {cpu['gateway']['cores']:.2f}{triton}"
    return f"{cpu['server']['cores']:.2f}" if "server" in cpu else "–"


def times_cell(times: dict) -> str:
    """The gateway's mean first-response time from Triton and its own TTFP (speak → first
    frame sent), which the client's TTFP splits into; – where the server has no metrics."""
    tr, gw = times.get("triton_first_response_ms_mean"), times.get("gateway_ttfp_ms_mean")
    return "–" if tr is None and gw is None else f"{tr if tr is not None else '–'} / {gw if gw is not None else '–'}"


def limit_share(row: dict, limit: dict) -> str:
    """Throughput as a % of the compute limit, per wall-second and per CPU-second."""
    if not limit:
        return "–"
    per_cpu = efficiency(row)
    by_cpu = f"{100 * per_cpu / limit['audio_s_per_cpu_s']:.0f}" if per_cpu and limit.get("audio_s_per_cpu_s") else "–"
    return f"{100 * row['throughput_audio_s_per_s'] / limit['audio_s_per_s']:.0f} / {by_cpu} %"


def table(results: dict) -> str:
    head = ("| system | workload | clients | streams | TTFP p50 / p90 / p99 ms | L_sf p50 / p99 ms | RTF p50 / max | throughput audio-s/s "
            "| % of limit: wall / CPU | stalls (streams) | stalled ms | server-side TTFP mean ms: Triton / gateway | server CPU, cores | client CPU, cores | others' CPU, cores | refused (busy) | errors |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sorted(results["runs"], key=lambda r: (r["system"] != OURS, r["system"], r["workload"], r["level"])):
        share = limit_share(r, results["limit"].get(r["workload"], {}))
        t = r["ttfp_ms"]
        lines.append(
            f"| {r['system']} | {r['workload']} | {r['level']} | {r['streams']} | {t['p50']:.0f} / {t['p90']:.0f} / {t['p99']:.0f} "
            f"| {lsf_cell(r)} | {r['rtf']['p50']:.3f} / {r['rtf']['max']:.3f} | {r['throughput_audio_s_per_s']:.1f} | {share} "
            f"| {r['stalls']} ({r['streams_stalled']}) | {r['stalled_ms']:.0f} | {times_cell(r.get('server_times', {}))} | {cpu_cell(r['cpu'])} "
            f"| {r['cpu']['client']['cores']:.2f} | {r['cpu']['others']['cores']:.2f} | {r.get('refused', 0)} "
            f"| {r['errors']} |"
        )
    return "\n".join(lines)


def lsf_cell(row: dict) -> str:
    lsf = row.get("lsf_ms")
    return f"{lsf['p50']:.0f} / {lsf['p99']:.0f}" if lsf else "–"


def start_floor_ms(capacity: dict, streams: int) -> float:
    """How soon, at best, the last of `streams` started together hears its first audio:
    their first packets' least compute, spread over the cores."""
    return streams * capacity["first_packet_ms"] / capacity["cores"]


def capacity_table(results: dict) -> str:
    """Listeners at multiples of C, every system: L_sf as a ratio to T_sent, stalls,
    refusals and how soon they came, admitted throughput as a ratio to C."""
    capacity = results.get("capacity")
    if not capacity or not results.get("capacity_runs"):
        return ""
    t_sent, c = capacity["t_sent_ms"], capacity["C"]
    head = ("| system | × C | arrivals | listeners | admitted | refused | refusal p50 / max ms | L_sf p50 / p99 ms "
            "| L_sf p50 / p99 ÷ T_sent | start floor ÷ T_sent | stalls (streams) | stalled ms "
            "| admitted throughput ÷ C | errors |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sorted(results["capacity_runs"],
                    key=lambda r: (r["system"] != OURS, r["system"], r["arrivals"], r["of_capacity"])):
        lsf, ref = r["lsf_ms"], r["refusal_ms"]
        refusal = f"{ref['p50']:.0f} / {ref['max']:.0f}" if r["refused"] else "–"
        admitted = r["streams"] - r["refused"] - r["errors"]
        together = r["arrivals"] == "together"
        floor = f"{start_floor_ms(capacity, admitted) / t_sent:.2f}" if together else "–"
        arrivals = "together" if together else f"Poisson, {r['rate_per_s']:.2f}/s"
        lines.append(
            f"| {r['system']} | {r['of_capacity']:g} | {arrivals} | {r['level']} | {admitted} "
            f"| {r['refused']} | {refusal} | {lsf['p50']:.0f} / {lsf['p99']:.0f} "
            f"| {lsf['p50'] / t_sent:.2f} / {lsf['p99'] / t_sent:.2f} "
            f"| {floor} | {r['stalls']} ({r['streams_stalled']}) "
            f"| {r['stalled_ms']:.0f} | {r['throughput_audio_s_per_s'] / c:.2f} | {r['errors']} |"
        )
    return (
        f"## Listeners at multiples of capacity\n\nEach client listens to one {capacity['workload']} in real time; they "
        f"start together, or arrive one by one as a Poisson process whose rate keeps that multiple of C listening on "
        f"average (over --arrival-seconds; a refused listener leaves). "
        f"References measured in this run (DESIGN.md): C = **{c:.1f} audio-s/s** (the compute limit), "
        f"T_sent = **{t_sent:.0f} ms** (the first sentence synthesized whole on one thread). The start floor is "
        f"the least time before the last of the admitted streams can start: each first packet computes at least "
        f"{capacity['first_packet_ms']:.0f} ms on a core (the prior, the head's flow, the first window), "
        f"and {capacity['cores']} cores share them.\n\n" + "\n".join(lines) + "\n\n"
    )


def limit_line(name: str, limit: dict, runs: list[dict]) -> str:
    rates = " and ".join(f"{run[name]['audio_s_per_s']:.1f}" for run in runs)
    return (
        f"- compute limit, {name}: **{limit['audio_s_per_s']:.1f} audio-s/s** on {limit['cores']} cores, "
        f"{limit.get('audio_s_per_cpu_s', math.nan):.1f} audio-s per CPU-s (whole-utterance onnxruntime in process, "
        f"one thread per core; one core's RTF {limit['rtf_one_core_p50']:.3f}"
        + (f"; the higher of {rates} audio-s/s, measured before and after the servers)" if runs else ")")
    )


def markdown(results: dict) -> str:
    m, o = results["machine"], results["options"]
    limits = "\n".join(limit_line(name, limit, results.get("limit_runs", [])) for name, limit in results["limit"].items())
    checks = "\n".join(f"- {'met' if g['met'] else '**missed**'}: {g['goal']} = {g['value']} (goal {g['target']})" for g in results["goals"])
    return (
        f"# Benchmark\n\n{results['date']} · {m['model']} · {m['cores']} cores · commit `{results['commit']}`"
        f"{' (with the uncommitted changes in its working tree)' if results['commit'].endswith('-dirty') else ''} · "
        f"load average {m['loadavg_before'][0]:.1f} before, {m['loadavg_after'][0]:.1f} after (shared machine)\n\n"
        f"`{results['command']}` — clients speak {results['mode']}, {o['rounds']} utterances per client and at least "
        f"{o['min_streams']} per level, none started after {o['level_seconds']:g} s into a level; Opus over protocol v1 for ours, "
        f"the whole WAV for piper-http, PCM chunks for wyoming-piper. TTFP: request sent → first audio; "
        f"RTF: sent → last audio ÷ audio duration; throughput: audio-s ÷ wall-s, all streams; stalls: a player "
        f"starting 50 ms after the first audio, in real time; CPU in cores (CPU s ÷ wall s), gw = gateway, "
        f"tr = tritonserver + its Python backend stubs; client = this benchmark; others = the rest of the machine "
        f"meanwhile.\n\n"
        f"{table(results)}\n\n{limits}\n\n{capacity_table(results)}{formats_table(results)}## Goals\n\n{checks}\n\n{section(results)}"
    )


def formats_table(results: dict) -> str:
    """First audio of the HTTP API per response format at 1 client (perf.speech.formats)."""
    formats = results.get("formats")
    if not formats:
        return ""
    rows = "\n".join(f"| {fmt} | {f['p50_ms']:.0f} | {f['min_ms']:.0f} – {f['max_ms']:.0f} | {f['vs_pcm_ms']:+.0f} | "
                     f"{f['p50_ms'] / formats['pcm']['p50_ms']:.2f} |" for fmt, f in formats.items())
    return (
        f"## First audio per HTTP format\n\n`POST /v1/audio/speech`, one request at a time, "
        f"{next(iter(formats.values()))['rounds']} per format, formats interleaved: request sent → the byte its first "
        f"audio needs (Ogg: the end of the first page with audio; WAV, FLAC: the first byte after the header; mp3: "
        f"the first frame).\n\n| format | p50 ms | min – max ms | − pcm ms | ÷ pcm |\n|---|---|---|---|---|\n{rows}\n\n"
    )


def plot_formats(results: dict, path: Path) -> None:
    """First audio per HTTP format: median bars, min-max whiskers, pcm's median as a line."""
    formats = results.get("formats")
    if not formats:
        return
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(formats)
    p50 = [formats[f]["p50_ms"] for f in names]
    spread = [[p - formats[f]["min_ms"] for f, p in zip(names, p50)], [formats[f]["max_ms"] - p for f, p in zip(names, p50)]]
    ax.bar(names, p50, yerr=spread, capsize=4, color=[f"C{i}" for i in range(len(names))])
    ax.axhline(formats["pcm"]["p50_ms"], color="k", linewidth=0.8, linestyle="--", label="pcm p50")
    ax.set_ylabel("first audio (ms)")
    ax.set_title("HTTP first audio per response_format, 1 client")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def systems_in(results: dict) -> list[str]:
    names = {r["system"] for r in results["runs"]}
    return [OURS] * (OURS in names) + sorted(names - {OURS})


def plot_ttfp(results: dict, path: Path) -> None:
    """TTFP distribution per level: one box per system at each level, one panel per workload."""
    plt = pyplot()
    workloads, systems = results["workloads"], systems_in(results)
    fig, axes = plt.subplots(len(workloads), 1, figsize=(10, 4 * len(workloads)), squeeze=False)
    width = 0.8 / max(1, len(systems))
    for ax, workload in zip(axes[:, 0], workloads):
        levels = sorted({r["level"] for r in results["runs"] if r["workload"] == workload})
        for k, system in enumerate(systems):
            rows = [at_level(results, system, workload, level) for level in levels]
            data = [(i + (k - (len(systems) - 1) / 2) * width, r["ttfp_samples_ms"]) for i, r in enumerate(rows) if r and r["ttfp_samples_ms"]]
            if not data:
                continue
            box = ax.boxplot([d for _, d in data], positions=[p for p, _ in data], widths=width * 0.9,
                             patch_artist=True, whis=(1, 99), showfliers=False)
            for patch in box["boxes"]:
                patch.set_facecolor(f"C{k}")
            ax.plot([], [], color=f"C{k}", linewidth=8, label=system)
        ax.set_xticks(range(len(levels)), [str(level) for level in levels])
        ax.set_yscale("log")
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("TTFP (ms)")
        ax.set_title(f"time to first audio, {workload} (box p25-p75, whiskers p1-p99)")
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_throughput(results: dict, path: Path) -> None:
    """Throughput (with the compute limit) and underruns against concurrency, per workload."""
    plt = pyplot()
    workloads, systems = results["workloads"], systems_in(results)
    fig, axes = plt.subplots(len(workloads), 2, figsize=(12, 4 * len(workloads)), squeeze=False)
    for (left, right), workload in zip(axes, workloads):
        for k, system in enumerate(systems):
            rows = rows_of(results, system, workload)
            levels = [r["level"] for r in rows]
            left.plot(levels, [r["throughput_audio_s_per_s"] for r in rows], "o-", color=f"C{k}", label=system)
            right.plot(levels, [100 * r["streams_stalled"] / max(1, r["streams"]) for r in rows], "o-", color=f"C{k}", label=system)
        if limit := results["limit"].get(workload):
            left.axhline(limit["audio_s_per_s"], color="black", linestyle="--", label="compute limit")
        levels = sorted({r["level"] for r in results["runs"] if r["workload"] == workload})
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xticks(levels, [str(level) for level in levels])
            ax.set_xlabel("concurrent clients")
            ax.grid(alpha=0.3)
            ax.legend()
        left.set_ylim(bottom=0)
        left.set_ylabel("audio-s per wall-s")
        left.set_title(f"throughput, {workload}")
        right.set_ylabel("% of streams with an underrun")
        right.set_title(f"underruns (player starts 50 ms after first audio), {workload}")
        right.set_ylim(bottom=-2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results: dict, out: Path) -> str:
    """bench.md, ttfp.png, throughput.png and formats.png (where formats ran) in `out`; the Markdown."""
    text = markdown(results)
    (out / "bench.md").write_text(text)
    plot_ttfp(results, out / "ttfp.png")
    plot_throughput(results, out / "throughput.png")
    plot_formats(results, out / "formats.png")
    return text


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "results" / "speech"
    bench = json.loads((folder / "bench.json").read_text())
    bench["goals"] = goals(bench)
    print(write_report(bench, folder))
