"""Checks the Thinker's CPU engine (python_backends.thinker.llama_engine) in the vLLM
environment, where tests/vllm/test_thinker_engines.py runs it, on the embedded model's
GGUF: replies alone and batched, a draft verified, a reply gone on after a prefix, a
reply dropped early, replies drawn with a seed. Prints one JSON line."""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing

from python_backends.thinker.gguf_model import embedded_model_dir
from python_backends.thinker.llama_engine import LlamaCppThinker

SYSTEM = {"role": "system", "content": "Answer in one or two short sentences."}
QUESTIONS = ["What is the capital of France?", "Tell me a story about a dragon.", "What is 2+2?",
             "Who wrote Hamlet?", "How do I boil an egg?"]


def asking(question: str) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": question}]


async def written(engine: LlamaCppThinker, messages, **options) -> tuple[list[int], str, list[int | None]]:
    """A reply's tokens, its text, and each piece's `accepted`."""
    ids, text, accepted = [], "", []
    async for piece in engine.reply(messages, max_tokens=40, **options):
        ids += piece.token_ids
        text += piece.text
        accepted.append(piece.accepted)
    return ids, text, accepted


async def check() -> dict:
    engine = LlamaCppThinker(embedded_model_dir(), threads=1, slots=2)
    try:
        await engine.warm_up()
        alone = [await written(engine, asking(q)) for q in QUESTIONS]
        together = await asyncio.gather(*(written(engine, asking(q)) for q in QUESTIONS))  # more replies than slots
        reply = alone[0][0]
        # A draft written for the question before its last word, verified against the whole question.
        draft = (await written(engine, asking("What is the capital of")))[0]
        verified = await written(engine, asking(QUESTIONS[0]), draft=draft[:-1])
        exact = await written(engine, asking(QUESTIONS[0]), draft=reply[:6])
        after_prefix = await written(engine, asking(QUESTIONS[0]), prefix=reply[:3])
        seeded = [(await written(engine, asking(QUESTIONS[1]), temperature=1.0, seed=seed))[0] for seed in (7, 7, 8)]
        async with aclosing(engine.reply(asking(QUESTIONS[1]), max_tokens=200)) as pieces:
            async for _ in pieces:
                break
        await asyncio.sleep(0.5)  # the compute thread ends the dropped reply at its next step
        dropped = engine.stats.running
        generated = engine.stats.generated_tokens
        await asyncio.sleep(0.5)
        return {
            "replies": [text for _, text, _ in alone],
            "batched_as_alone": [a[0] for a in alone] == [t[0] for t in together],
            "verified_is_reply": verified[0] == reply, "verified_accepted": verified[2][0], "draft": len(draft) - 1,
            "exact_is_reply": exact[0] == reply, "exact_accepted": exact[2][0],
            "after_prefix_is_rest": after_prefix[0] == reply[3:],
            "running_after_drop": dropped, "written_after_drop": engine.stats.generated_tokens - generated,
            "end_token": engine.tokenizer.decode(reply[-1:]),
            "verifications": engine.stats.drafts_verified,
            "same_seed_same_reply": seeded[0] == seeded[1], "other_seed_other_reply": seeded[0] != seeded[2],
        }
    finally:
        engine.shutdown()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(check())))
