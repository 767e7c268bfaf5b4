"""The Thinker's engines side by side, in process: the embedded SmolLM2-135M on vLLM
(float32, as the `thinker` model ran it before llama.cpp) and on llama.cpp (its GGUF),
each on 1 and 2 threads.

    .venv-ar/bin/python -m perf.voice.thinker [--tokens 64] [--rounds 5] [--out DIR]

Per engine and thread count: the first token's time after a new conversation's prompt
(its tokens not seen before) and after the same conversation asked again (llama.cpp's
slot, vLLM's prefix cache), decode tokens per second for one reply alone and for four at
once, medians over --rounds, and whether each engine's greedy replies are the same text.
Runs in the vLLM environment; one engine at a time, each in a process of its own (their
threads are set as they start). A table and the JSON in --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SYSTEM = "Answer in one or two short sentences."
QUESTIONS = ["What is the capital of France?", "Tell me a story about a dragon.", "Who wrote Hamlet?",
             "How do I boil an egg?", "What is your favorite kind of music?"]
ENGINES = ("vllm", "llama.cpp")


def asking(question: str, salt: int = 0) -> list[dict[str, str]]:
    """A conversation; `salt` makes its prompt's tokens new to the engine's cache."""
    system = SYSTEM if not salt else f"{SYSTEM} (Conversation {salt}.)"
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


async def timed(engine, messages, tokens: int) -> tuple[float, float, int, str]:
    """The first token's time, the decode rate after it, the tokens written, the text."""
    started = time.perf_counter()
    first, count, text = None, 0, ""
    async for piece in engine.reply(messages, max_tokens=tokens):
        first = first or time.perf_counter()
        count += len(piece.token_ids)
        text += piece.text
    done = time.perf_counter()
    return first - started, (count - 1) / max(done - first, 1e-9), count, text


async def measure(name: str, threads: int, tokens: int, rounds: int) -> dict:
    from python_backends.thinker.gguf_model import embedded_model_dir

    if name == "vllm":
        os.environ["OMP_NUM_THREADS"] = str(threads)
        from python_backends.thinker.vllm_engine import VllmThinker

        engine = VllmThinker(embedded_model_dir())
    else:
        from python_backends.thinker.llama_engine import LlamaCppThinker

        engine = LlamaCppThinker(embedded_model_dir(), threads=threads)
    try:
        await engine.warm_up()
        cold, warm, alone, texts = [], [], [], []
        for r in range(rounds):
            question = QUESTIONS[r % len(QUESTIONS)]
            cold.append((await timed(engine, asking(question, salt=1000 + r), tokens))[0])
            ttft, rate, _, text = await timed(engine, asking(question), tokens)
            ttft, rate, _, text = await timed(engine, asking(question), tokens)  # asked again: its tokens kept
            warm.append(ttft)
            alone.append(rate)
            texts.append(text)
        together = []
        for _ in range(rounds):
            started = time.perf_counter()
            runs = await asyncio.gather(*(timed(engine, asking(q), tokens) for q in QUESTIONS[:4]))
            together.append(sum(n for _, _, n, _ in runs) / (time.perf_counter() - started))
        return {"engine": name, "threads": threads, "first_token_new_ms": 1000 * statistics.median(cold),
                "first_token_again_ms": 1000 * statistics.median(warm), "tokens_per_s_alone": statistics.median(alone),
                "tokens_per_s_four_at_once": statistics.median(together), "texts": texts}
    finally:
        engine.shutdown()


def table(rows: list[dict]) -> str:
    lines = ["| engine | threads | first token, new conversation ms | asked again ms | tokens/s, one reply "
             "| tokens/s, four at once (all together) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['engine']} | {r['threads']} | {r['first_token_new_ms']:.0f} | "
                     f"{r['first_token_again_ms']:.0f} | {r['tokens_per_s_alone']:.1f} | "
                     f"{r['tokens_per_s_four_at_once']:.1f} |")
    same = {r["engine"]: r["texts"] for r in rows}
    lines += ["", f"Greedy replies the same text on both engines: "
              f"{sum(a == b for a, b in zip(same['vllm'], same['llama.cpp']))} of {len(same['vllm'])}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--out", type=Path, default=Path("perf/results/voice/thinker"))
    parser.add_argument("--one", nargs=2, metavar=("ENGINE", "THREADS"), help=argparse.SUPPRESS)  # a child's run
    args = parser.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(measure(args.one[0], int(args.one[1]), args.tokens, args.rounds))))
        return
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        for name in ENGINES:
            run = subprocess.run([sys.executable, "-m", "perf.voice.thinker", "--tokens", str(args.tokens),
                                  "--rounds", str(args.rounds), "--one", name, str(threads)],
                                 capture_output=True, text=True, check=True)
            rows.append(json.loads(run.stdout.splitlines()[-1]))
            print(f"{name} on {threads}: {rows[-1]['tokens_per_s_alone']:.1f} tokens/s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "thinker.json").write_text(json.dumps(rows, indent=2))
    (args.out / "thinker.md").write_text(table(rows) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
