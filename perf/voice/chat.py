"""Voice chat's wait, end of the question → first sound of the answer, with input-time
speculation (PredGen) off, greedy and top-3.

    python -m perf.voice.chat [--questions 12] [--out DIR]

Real users' opening questions (the chitchat-dataset's prompts) are typed at 10
characters a second, as a speech recognizer would hear them: a partial transcript at
each word's end, the whole question the last, then the final one, at once (PredGen's
setting) or --endpointing-ms later (a recognizer waiting for silence before it ends a
turn, as voice agents' turn detection does). Each question is
asked once per mode, the modes in turn (interleaved, so the machine's drift falls on
all alike), each on a connection of its own to a server of its own (Triton with the
embedded SmolLM2 and the Piper chain, the gateway in front). Per mode it reports the
wait (median, p90, and the median's ratio to off), the outcomes, the draft tokens kept,
what speculation costs per turn beside off on the same question (LLM tokens written,
Triton's CPU seconds), and the held audio synthesized and thrown away; a table, the
JSON and a plot in --out.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import urllib.request
from pathlib import Path

from contract import models as c
from operations.loopback import Servers, cpu_seconds, triton_metrics
from perf.tools.results import save
from speechstream.client import SpeechClient

MODES = ("off", "greedy", "top_k")
CHARS_PER_S = 10.0
SYSTEM = "You are a friendly voice assistant. Answer in one or two short sentences."
GOAL_GREEDY = 0.5  # greedy's median wait ÷ off's


def questions(n: int, seed: int = 0) -> list[str]:
    """`n` distinct opening prompts of the chitchat-dataset, of a spoken question's length."""
    import chitchat_dataset

    prompts = sorted({conv["prompt"].strip() for conv in chitchat_dataset.Dataset().values() if conv.get("prompt")})
    spoken = [q for q in prompts if 20 <= len(q) <= 90 and q.endswith("?")]
    return random.Random(seed).sample(spoken, n)


def word_ends(text: str) -> list[int]:
    """Where each word of `text` ends: a partial transcript is sent at each."""
    return [i for i in range(1, len(text) + 1) if i == len(text) or (text[i] == " " and text[i - 1] != " ")]


async def typed_turn(url: str, question: str, mode: str, top_k: int, max_tokens: int, endpointing_s: float) -> dict:
    """One turn, typed at CHARS_PER_S, its final `endpointing_s` after the last word; its
    wait and what the server said of it."""
    chat = {"speculation": mode, "top_k": top_k, "system": SYSTEM, "max_tokens": max_tokens}
    async with await SpeechClient.connect(url, format="pcm_s16le", chat=chat) as client:
        turn = client.turn()
        start = time.perf_counter()
        for end in word_ends(question):
            await asyncio.sleep(max(0.0, start + end / CHARS_PER_S - time.perf_counter()))
            await turn.user(question[:end])
        await asyncio.sleep(endpointing_s)
        final_at = await turn.user(question, final=True)
        async with asyncio.timeout(180):
            events = [event async for event in turn.events()]
    reply = next(e for e in events if e.kind == "reply")
    first_audio = next(e.at for e in events if e.frame is not None)
    return {
        "mode": mode, "question": question, "wait_s": first_audio - final_at, "first_piece_s": reply.at - final_at,
        **{k: reply.message[k] for k in ("outcome", "rounds", "draft_tokens", "accepted_tokens")},
        "reply": "".join(e.message["text"] for e in events if e.kind == "reply_text"), "audio_ms": turn.done["audio_ms"],
    }


def gateway_counter(port: int, name: str, label: str) -> float:
    """The gateway's counter `name` with the label `label` (key="value")."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(f"{name}{{{label}}}"))


def run(n: int, top_k: int, max_tokens: int, endpointing_s: float, log_dir: Path) -> dict:
    servers = Servers(log_dir, chat_model="embedded")
    servers.start()
    turns = []
    try:
        asyncio.run(typed_turn(servers.url, "Hello, are you there?", "greedy", top_k, max_tokens, 0))  # warm-up
        for i, question in enumerate(questions(n)):
            for mode in MODES[i % 3:] + MODES[:i % 3]:
                tokens = triton_metrics(servers.metrics_port)[c.THINKER_TOKENS_METRIC]
                cpu = cpu_seconds(servers.triton_tree())
                held = {f: gateway_counter(servers.port, "speechstream_chat_held_audio_seconds_total", f'fate="{f}"')
                        for f in ("released", "discarded")}
                turn = asyncio.run(typed_turn(servers.url, question, mode, top_k, max_tokens, endpointing_s))
                time.sleep(0.5)  # the Thinker's last counts reach Triton's metrics
                turn["llm_tokens"] = triton_metrics(servers.metrics_port)[c.THINKER_TOKENS_METRIC] - tokens
                turn["triton_cpu_s"] = cpu_seconds(servers.triton_tree()) - cpu
                for fate, before in held.items():
                    turn[f"held_{fate}_s"] = gateway_counter(
                        servers.port, "speechstream_chat_held_audio_seconds_total", f'fate="{fate}"') - before
                turns.append(turn)
                print(f"{mode:6} {turn['wait_s'] * 1000:6.0f} ms (Thinker's first piece {turn['first_piece_s'] * 1000:4.0f}) "
                      f"{turn['outcome']:8} {turn['accepted_tokens']:3}/{turn['draft_tokens']:3} {question}", flush=True)
    finally:
        servers.stop()
    return {"questions": n, "top_k": top_k, "max_tokens": max_tokens, "chars_per_s": CHARS_PER_S,
            "endpointing_s": endpointing_s, "turns": turns,
            "summary": summarize(turns)}


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def beside_off(mine: list[dict], off: dict[str, dict]) -> dict:
    """What a mode's turns came to, each beside off's turn on the same question."""
    return {
        "outcomes": {o: sum(t["outcome"] == o for t in mine) for o in ("held", "partial", "rejected", "off")},
        "extra_llm_tokens": statistics.mean(t["llm_tokens"] - off[t["question"]]["llm_tokens"] for t in mine),
        "discarded_tts_s": statistics.mean(t["held_discarded_s"] for t in mine),
        "same_reply_as_off": sum(t["reply"] == off[t["question"]]["reply"] for t in mine),
    }


def summarize(turns: list[dict]) -> dict:
    off = {t["question"]: t for t in turns if t["mode"] == "off"}
    base = statistics.median(t["wait_s"] for t in off.values())
    summary = {}
    for mode in MODES:
        mine = [t for t in turns if t["mode"] == mode]
        waits = [t["wait_s"] for t in mine]
        drafted = sum(t["draft_tokens"] for t in mine)
        summary[mode] = {
            "turns": len(mine), "wait_median_s": statistics.median(waits), "wait_p90_s": p90(waits),
            "ratio_to_off": statistics.median(waits) / base,
            "accepted_per_draft_token": sum(t["accepted_tokens"] for t in mine) / drafted if drafted else None,
            "extra_triton_cpu_s": statistics.mean(t["triton_cpu_s"] - off[t["question"]]["triton_cpu_s"] for t in mine),
            "held_tts_s": statistics.mean(t["held_released_s"] + t["held_discarded_s"] for t in mine),
            **beside_off(mine, off),
        }
    return summary


def table(results: dict) -> str:
    s = results["summary"]
    lines = [
        f"Voice chat: end of question → first audio, {results['questions']} chitchat-dataset questions typed at "
        f"{results['chars_per_s']:g} characters/s, the final {results['endpointing_s'] * 1000:.0f} ms after the last "
        f"word, replies of at most {results['max_tokens']} tokens, embedded "
        f"SmolLM2-135M on llama.cpp (CPU) and the embedded Piper voice. Costs per turn are beside off on the same question.",
        "",
        "| speculation | wait median ms | p90 ms | ÷ off | held / partial / rejected | kept ÷ drafted tokens "
        "| extra LLM tokens | extra Triton CPU s | held TTS s (thrown away) | reply = off's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in s.items():
        o = r["outcomes"]
        kept = "–" if r["accepted_per_draft_token"] is None else f"{r['accepted_per_draft_token']:.2f}"
        name = f"top-{results['top_k']}" if mode == "top_k" else mode
        lines.append(
            f"| {name} | {r['wait_median_s'] * 1000:.0f} | {r['wait_p90_s'] * 1000:.0f} | {r['ratio_to_off']:.2f} "
            f"| {o['held']} / {o['partial']} / {o['rejected']} | {kept} | {r['extra_llm_tokens']:.0f} "
            f"| {r['extra_triton_cpu_s']:.2f} | {r['held_tts_s']:.2f} ({r['discarded_tts_s']:.2f}) "
            f"| {r['same_reply_as_off']} of {r['turns']} |")
    greedy, top = s["greedy"]["ratio_to_off"], s["top_k"]["ratio_to_off"]
    lines += ["", f"Goal: greedy's median ≤ {GOAL_GREEDY} × off's: {greedy:.2f} "
              f"({'met' if greedy <= GOAL_GREEDY else 'missed'}); top-{results['top_k']} lower: {top:.2f} "
              f"({'met' if top < greedy else 'missed'})."]
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    from perf.tools.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode in MODES:
        waits = sorted(t["wait_s"] * 1000 for t in results["turns"] if t["mode"] == mode)
        ax.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post", label=mode)
    ax.set(xlabel="end of question → first audio (ms)", ylabel="fraction of turns", xscale="log",
           title="voice chat wait by speculation")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def question_options(description: str) -> argparse.ArgumentParser:
    """The options of a run of chat turns: how many questions, the speculation's top-k,
    the replies' length."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    return parser


def main() -> None:
    parser = question_options(__doc__.splitlines()[0])
    parser.add_argument("--endpointing-ms", type=float, default=0.0,
                        help="how long after the last word the final transcript comes (0: at once)")
    parser.add_argument("--out", type=Path, default=Path("perf/results/voice"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = run(args.questions, args.top_k, args.max_tokens, args.endpointing_ms / 1000, args.out)
    name = "chat" if not args.endpointing_ms else f"chat-endpointing-{args.endpointing_ms:g}ms"
    save(args.out, name, results, table(results), plot)


if __name__ == "__main__":
    main()
