"""How a spoken turn's end is heard, both turn detectors side by side: `silence` (the
endpoint's silence alone) and `smart` (Smart Turn v3.2 asked at 200 ms of silence).

    python -m perf.voice.turns [--questions 12] [--pauses 300,500,800] [--out DIR]

In process, over the recognizer's own engines and state machine (Silero VAD, Whisper
tiny.en, Smart Turn; python_backends.asr.utterances, as the `asr` model runs them):
questions with a comma in the middle (the chitchat-dataset's, and some written like them)
are spoken by the embedded voice in two halves with a pause at the comma (as SSML's
<break> would put one), and a
question heard as more than one utterance is a false cut-off; questions without a comma
are spoken whole, and the audio from their speech's end to their final (the endpoint's
decision, by the audio's clock) and the compute the decision took are measured, with
the word error rate of the finals. A table, the JSON and a plot in --out.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import numpy as np

from contract.models import ASR_SAMPLE_RATE, FINAL
from perf.tools.results import save
from python_backends.asr.engines import SileroVad, SmartTurn, WhisperTranscriber
from python_backends.asr.smart_turn_model import smart_turn_path
from python_backends.asr.utterances import Policy, Utterances
from tests.speech import silence, spoken, word_error_rate

ENDPOINT_MS = 500
REQUEST_MS = 100  # the gateway's requests to the recognizer carry about this much audio
DETECTORS = ("silence", "smart")
GOALS = {"false_cutoffs": 0.10, "word_error_rate": 0.10}


# Questions with a pause in their middle: the chitchat-dataset's prompts that have a comma
# between two halves (7 of its 34), and questions of the same kind written for this benchmark.
WRITTEN = [
    "When you were a child, what did you want to be?",
    "If you could live anywhere in the world, where would you live?",
    "Out of all the books you have read, which one changed you the most?",
    "Before you go to sleep, what do you like to think about?",
    "If you could meet anyone from history, who would it be?",
]


def chitchat(n: int, seed: int) -> tuple[list[str], list[str]]:
    """Up to `n` questions with a comma between two halves of 2 words or more, and `n` without a comma."""
    import chitchat_dataset

    prompts = sorted({c["prompt"].strip() for c in chitchat_dataset.Dataset().values() if c.get("prompt")})
    asked = [q for q in prompts if 20 <= len(q) <= 120 and q.endswith("?")]
    paused = [q for q in asked if q.count(", ") == 1 and all(len(h.split()) >= 2 for h in q.split(", "))] + WRITTEN
    whole = [q for q in asked if "," not in q and len(q) <= 90]
    rng = random.Random(seed)
    return rng.sample(paused, min(n, len(paused))), rng.sample(whole, min(n, len(whole)))


def hear(engines: tuple, audio: np.ndarray, smart: bool) -> tuple[list[tuple[int, object]], float]:
    """The recognizer's events for `audio` in REQUEST_MS requests (each with the audio ms
    heard when it came), and the seconds of compute the requests took."""
    vad, whisper, turns = engines
    utterances = Utterances(vad.stream(), whisper, Policy(), turns)
    step = ASR_SAMPLE_RATE * REQUEST_MS // 1000
    events, busy = [], 0.0
    for at in range(0, len(audio), step):
        started = time.perf_counter()
        heard = utterances.hear(audio[at : at + step], ENDPOINT_MS, smart=smart)
        busy += time.perf_counter() - started
        events += [((at + step) * 1000 // ASR_SAMPLE_RATE, e) for e in heard]
    return events, busy


def trimmed(speech: np.ndarray) -> np.ndarray:
    """Speech without the silence the voice puts before and after it, so that a pause is the pause asked for."""
    loud = np.flatnonzero(np.abs(speech.astype(np.float32)) > 0.02 * np.abs(speech).max())
    return speech[loud[0] : loud[-1] + 1]


def pcm(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts).astype(np.float32) / 32768


def run(questions: int, pauses: list[int], seed: int) -> dict:
    paused, whole = chitchat(questions, seed)
    engines = (SileroVad(), WhisperTranscriber(threads=1), SmartTurn(smart_turn_path()))
    results: dict = {"endpoint_ms": ENDPOINT_MS, "pauses_ms": pauses, "detectors": {}}
    for detector in DETECTORS:
        smart = detector == "smart"
        cutoffs = {pause: [] for pause in pauses}
        for question in paused:
            first, second = question.split(", ")
            halves = trimmed(spoken(first + ",")), trimmed(spoken(second))
            for pause in pauses:
                events, _ = hear(engines, pcm(silence(500), halves[0], silence(pause), halves[1], silence(1500)), smart)
                cutoffs[pause].append(sum(e.kind == FINAL for _, e in events) > 1)
        decided, wer, busy = [], [], []
        for question in whole:
            speech = trimmed(spoken(question))
            speech_end_ms = 500 + len(speech) * 1000 // ASR_SAMPLE_RATE
            events, seconds = hear(engines, pcm(silence(500), speech, silence(1500)), smart)
            finals = [(ms, e) for ms, e in events if e.kind == FINAL]
            decided.append(finals[0][0] - speech_end_ms)
            wer.append(word_error_rate(question, " ".join(e.text for _, e in finals)))
            busy.append(seconds)
        results["detectors"][detector] = {
            "false_cutoffs": {str(p): sum(c) / len(c) for p, c in cutoffs.items()},
            "false_cutoffs_all": sum(sum(c) for c in cutoffs.values()) / sum(len(c) for c in cutoffs.values()),
            "speech_end_to_final_ms": {"median": statistics.median(decided), "max": max(decided)},
            "word_error_rate": statistics.mean(wer),
            "compute_s_per_question": statistics.mean(busy),
        }
    return results


def report(results: dict) -> str:
    pauses = results["pauses_ms"]
    lines = [
        f"How a spoken turn's end is heard (in process: Silero VAD, Whisper tiny.en, Smart Turn v3.2; endpoint "
        f"{results['endpoint_ms']} ms, audio in {REQUEST_MS} ms requests).",
        "",
        "| turn detection | " + " | ".join(f"false cut-offs, {p} ms pause" for p in pauses)
        + " | all | speech end → final median ms (audio) | max | WER | compute s per question |",
        "|---|" + "---|" * (len(pauses) + 5),
    ]
    for name, d in results["detectors"].items():
        lines.append(f"| {name} | " + " | ".join(f"{d['false_cutoffs'][str(p)]:.0%}" for p in pauses)
                     + f" | {d['false_cutoffs_all']:.0%} | {d['speech_end_to_final_ms']['median']:.0f} | "
                     f"{d['speech_end_to_final_ms']['max']:.0f} | {d['word_error_rate']:.1%} | "
                     f"{d['compute_s_per_question']:.2f} |")
    smart = results["detectors"]["smart"]
    lines += ["", f"Goals with smart: false cut-offs ≤ {GOALS['false_cutoffs']:.0%}: {smart['false_cutoffs_all']:.0%} "
              f"({'met' if smart['false_cutoffs_all'] <= GOALS['false_cutoffs'] else 'missed'}); word error rate ≤ "
              f"{GOALS['word_error_rate']:.0%}: {smart['word_error_rate']:.1%} "
              f"({'met' if smart['word_error_rate'] <= GOALS['word_error_rate'] else 'missed'})."]
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    pauses = results["pauses_ms"]
    for name, d in results["detectors"].items():
        left.plot(pauses, [100 * d["false_cutoffs"][str(p)] for p in pauses], marker="o", label=name)
    left.set(xlabel="pause at the comma (ms)", ylabel="questions cut in two (%)", title="False cut-offs")
    left.legend()
    names = list(results["detectors"])
    right.bar(names, [results["detectors"][n]["speech_end_to_final_ms"]["median"] for n in names])
    right.set(ylabel="ms of audio", title="Whole questions: speech end → final (median)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--pauses", default="300,500,800", help="pauses at the comma, ms, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("perf/results/voice/turns"))
    args = parser.parse_args()
    results = run(args.questions, [int(p) for p in args.pauses.split(",")], args.seed)
    save(args.out, "turns", results, report(results), plot)


if __name__ == "__main__":
    main()
