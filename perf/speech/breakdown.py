"""Where the time goes, from a benchmark's results: the path of a first packet at one
client, step by step; the CPU each stage spends per second of audio at saturation,
against the compute limit's; and this machine's speed against the one the goals were
set on, with the goals read at that scale (beside, never instead of, the goals as set).
"""

from __future__ import annotations

import math
import statistics

from perf.speech.goals import (
    GOAL_OVER_PEER,
    GOAL_TTFP_P50_1_MS,
    GOAL_TTFP_P99_8_MS,
    GOAL_TTFP_P99_32_MS,
    OURS,
    at_level,
    saturated,
)

# Measured where the goals were set (../shared/DESIGN.md): the paragraph's whole-utterance
# RTF on one core, and the first sentence's acoustic stage plus the first vocoder window.
GOALS_RTF_ONE_CORE = 0.040
GOALS_FLOOR_MS = 31.0
GOAL_LEVELS = (8, 32)


def ttfp_path(results: dict, workload: str) -> list[tuple[str, float]]:
    """(step, ms) of a first packet at 1 client, each step ending at the time given:
    the compute it waits for (in process), then the first `tts` response at the gateway,
    the first frame the gateway sends, the first frame at the client. Means, since the
    server's own times are histograms' means."""
    floor = results.get("ttfp_floor", {}).get(workload)
    row = at_level(results, OURS, workload, 1)
    if not floor or not row or not row.get("ttfp_samples_ms"):
        return []
    times = row.get("server_times", {})
    steps = [
        ("compute, in process: prior and the flow of the first head_frames on both cores, the first vocoder window",
         floor.get("lone_ms", floor["pieces_ms"])),
        ("Triton: gRPC, BLS calls between the stubs, scheduling", times.get("triton_first_response_ms_mean")),
        ("gateway: Opus, WebSocket", times.get("gateway_ttfp_ms_mean")),
        ("loopback and client", statistics.fmean(row["ttfp_samples_ms"])),
    ]
    return [(name, round(ms, 1)) for name, ms in steps if ms is not None]


def stage_costs(results: dict, workload: str) -> list[tuple[str, float, float | None]]:
    """(stage, CPU ms per audio second at our saturated level, the limit's) for the
    acoustic and vocoder stubs, the tts BLS stub, tritonserver and the gateway."""
    row = saturated(results, OURS, workload)
    limit = results.get("limit", {}).get(workload, {}).get("cpu_ms_per_audio_s", {})
    if not row or not row.get("triton_stages_cpu_s") or not row["audio_s"]:
        return []
    cpu_s = row["triton_stages_cpu_s"] | {"gateway": row["cpu"]["gateway"]["cpu_s"]}
    order = ["acoustic", "vocoder", "tts", "tritonserver", "gateway"]
    names = order + sorted(set(cpu_s) - set(order))
    return [(n, round(1000 * cpu_s[n] / row["audio_s"], 1), limit.get(n)) for n in names if n in cpu_s]


def machine_scale(results: dict) -> float | None:
    """How many times slower one core synthesizes here than where the goals were set
    (whole-utterance RTF on one core, paragraph, from this run's compute limit)."""
    limit = results.get("limit", {}).get("paragraph") or next(iter(results.get("limit", {}).values()), None)
    return limit["rtf_one_core_p50"] / GOALS_RTF_ONE_CORE if limit else None


def scaled_goals(results: dict, workload: str, scale: float) -> list[str]:
    """The TTFP and underrun goals read at this machine's scale: times × `scale`, and
    client counts ÷ `scale` (the same share of the machine), rounded up to a level run."""
    lines = []
    levels = sorted({r["level"] for r in results["runs"] if r["system"] == OURS and r["workload"] == workload})
    if row := at_level(results, OURS, workload, 1):
        target = GOAL_TTFP_P50_1_MS * scale
        lines.append(f"TTFP p50 at 1 client ≤ {target:.0f} ms: {row['ttfp_ms']['p50']:.0f} ms, {verdict(row['ttfp_ms']['p50'] <= target)}")
    for level, ttfp in zip(GOAL_LEVELS, (GOAL_TTFP_P99_8_MS, GOAL_TTFP_P99_32_MS)):
        here = next((n for n in levels if n >= level / scale), None)
        if here is None or not (row := at_level(results, OURS, workload, here)):
            continue
        target = ttfp * scale
        ok = row["ttfp_ms"]["p99"] <= target and row["stalls"] == 0
        lines.append(f"{level} clients there ≈ {here} here: TTFP p99 ≤ {target:.0f} ms and no underruns: "
                     f"{row['ttfp_ms']['p99']:.0f} ms, {row['stalls']} stalls, {verdict(ok)}")
    return lines


def peer_goal_against_limit(results: dict, workload: str) -> str | None:
    """What GOAL_OVER_PEER × the best peer's saturated throughput asks for, as a share
    of the compute limit: above 1, no server on this machine can meet it."""
    limit = results.get("limit", {}).get(workload, {}).get("audio_s_per_s")
    peers = filter(None, (saturated(results, p, workload) for p in {r["system"] for r in results["runs"]} - {OURS}))
    best = max((row["throughput_audio_s_per_s"] for row in peers), default=None)
    if not limit or not best:
        return None
    asked = GOAL_OVER_PEER * best
    return (f"{GOAL_OVER_PEER} × the best peer's {best:.1f} audio-s/s is {asked:.1f} audio-s/s, "
            f"{asked / limit:.2f} × the compute limit of {limit:.1f}")


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def ttfp_part(results: dict, workload: str) -> str | None:
    if not (path := ttfp_path(results, workload)):
        return None
    floor = results["ttfp_floor"][workload]
    rows = [f"| {name} | {ms - before:.1f} | {ms:.1f} |" for (name, ms), before in zip(path, [0.0] + [ms for _, ms in path])]
    return (
        f"### {workload}: a first packet at 1 client, mean ms\n\n| step | takes | done at |\n|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nThe floor as the goals define it, the first sentence's whole acoustic stage and the first vocoder "
        f"window, is {floor['whole_ms']:.1f} ms here ({floor['acoustic']:.1f} + {floor['first_window']:.1f}; "
        f"{GOALS_FLOOR_MS:.0f} ms where the goals were set). The first packet computes less than that: the prior "
        f"{floor['prior']:.1f}, the flow of {floor['head_frames']} frames {floor['head_flow']:.1f}, a "
        f"{floor['window_frames']}-frame window {floor['first_window']:.1f}."
    )


def costs_part(results: dict, workload: str) -> str | None:
    if not (costs := stage_costs(results, workload)):
        return None
    rows = [f"| {name} | {ms:.1f} | {'–' if limit is None else f'{limit:.1f}'} |" for name, ms, limit in costs]
    rows.append(f"| all | {sum(ms for _, ms, _ in costs):.1f} | {sum(limit for *_, limit in costs if limit is not None):.1f} |")
    return (f"### {workload}: CPU ms per audio second at our saturated level, against the compute limit\n\n"
            "| process | ours | limit |\n|---|---|---|\n" + "\n".join(rows))


def scale_part(results: dict) -> str | None:
    if not (scale := machine_scale(results)) or math.isnan(scale):
        return None
    scaled = [f"- {w}: {line}" for w in results["workloads"] for line in scaled_goals(results, w, scale)]
    peers = [f"- {w}: {line}" for w in results["workloads"] if (line := peer_goal_against_limit(results, w))]
    return (f"### At this machine's scale\n\nOne core here synthesizes {scale:.1f} times slower than where the goals "
            f"were set (whole-utterance RTF {GOALS_RTF_ONE_CORE} there). The goals read at that scale:\n\n"
            + "\n".join(scaled) + ("\n\nThe throughput goal against the peers, on this machine:\n\n" + "\n".join(peers) if peers else ""))


def section(results: dict) -> str:
    """The Markdown section "Where the time goes"; empty without the measurements."""
    parts = [part for w in results["workloads"] for part in (ttfp_part(results, w), costs_part(results, w))]
    parts = [p for p in parts + [scale_part(results)] if p]
    return "## Where the time goes\n\n" + "\n\n".join(parts) + "\n" if parts else ""
