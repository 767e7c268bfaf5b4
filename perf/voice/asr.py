"""The recognizer's cost and accuracy: chitchat questions spoken by the embedded voice,
heard as one stream, in process (the engines and the policy `asr` runs) and through a
real Triton in real time.

    OMP_NUM_THREADS=1 python -m perf.voice.asr [--questions 10] [--out perf/results/asr]

(OMP_NUM_THREADS=1 as `asr`'s shim sets it: without it ctranslate2's OpenMP threads spin
beside each pass.) It reports a pass's time on one thread for 2, 5, 10 and 20 s of
speech; the CPU seconds per second of audio of the stream heard in process with partials
and without (the work is placed by the audio's position, so it is the same whether the
audio comes in real time or not), and of `asr`'s Triton stub while the stream is sent to
it in real time, in 100 ms requests, with partials; the
partials' cadence in audio ms (the first after speech began, between partials while
speaking, and how long before the endpoint the whole question went out as a partial);
and the finals' word error rate. A table and the JSON in --out (asr.md, asr.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from contract.models import (
    ASR_MODEL,
    ASR_SAMPLE_RATE,
    ASR_STREAMS_METRIC,
    AUDIO,
    FINAL,
    PARTIAL,
    SPEECH_STARTED,
    STOP,
    STREAM_ID,
)
from operations.loopback import free_ports, triton_metrics
from operations.supervisor import TritonServer
from operations.triton_client import Stream
from perf.voice.chat import questions
from python_backends.asr.engines import SileroVad, WhisperTranscriber, encoder_seconds
from python_backends.asr.utterances import Event, Utterances
from tests.speech import silence, spoken, word_errors, words

REQUEST_MS = 100
ENDPOINT_MS = 500
GAP_MS = 1500  # silence between questions, and before the first


def pass_ms(transcriber: WhisperTranscriber, speech: np.ndarray, seconds: float, runs: int = 7) -> dict[str, int]:
    """A pass over the first `seconds` of `speech`: its encoder input, and the median of
    its wall time and of its CPU time (the time it would take on a core of its own, on a
    machine others share)."""
    audio = speech[: int(seconds * ASR_SAMPLE_RATE)]
    wall, cpu = [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        transcriber.transcribe(audio)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return {"encoder_s": encoder_seconds(seconds), "wall_ms": round(1000 * statistics.median(wall)),
            "cpu_ms": round(1000 * statistics.median(cpu))}


def heard(stream: np.ndarray, transcriber: WhisperTranscriber, partials: bool) -> tuple[list[tuple[int, Event]], float]:
    """The stream heard in requests of REQUEST_MS: each event with the position (ms) of
    the request that caused it, and the CPU seconds it took."""
    utterances = Utterances(SileroVad().stream(), transcriber)
    step = REQUEST_MS * ASR_SAMPLE_RATE // 1000
    events, started = [], time.process_time()
    for at in range(0, len(stream), step):
        piece = stream[at : at + step].astype(np.float32) / 32768
        events += [((at + len(piece)) * 1000 // ASR_SAMPLE_RATE, e) for e in utterances.hear(piece, ENDPOINT_MS, partials)]
    return events, time.process_time() - started


def triton_cpu_s(stream: np.ndarray, log: Path) -> float:
    """The CPU seconds `asr`'s stub spends hearing `stream`, sent to it in real time in
    requests of REQUEST_MS (with partials), the stream stopped after."""
    server = TritonServer(*free_ports(3), listen=True)
    with log.open("w") as out:
        server.start(stdout=out)
        try:
            server.wait_ready()
            stub = server.stub(ASR_MODEL)
            before, grpc = sum(stub.cpu_times()[:2]), Stream(f"127.0.0.1:{server.grpc_port}")
            step, started = REQUEST_MS * ASR_SAMPLE_RATE // 1000, time.monotonic()
            for at in range(0, len(stream), step):
                grpc.send(ASR_MODEL, {STREAM_ID: "perf", AUDIO: stream[at : at + step]})
                time.sleep(max(0.0, started + (at + step) / ASR_SAMPLE_RATE - time.monotonic()))
            grpc.send(ASR_MODEL, {STREAM_ID: "perf", STOP: np.array([True])})
            while triton_metrics(server.metrics_port)[ASR_STREAMS_METRIC]:  # the STOP heard
                time.sleep(0.1)
            grpc.close()
            return sum(stub.cpu_times()[:2]) - before
        finally:
            server.stop()


def cadence(events: list[tuple[int, Event]]) -> dict[str, float]:
    """In audio ms: speech start → first partial, between partials while speaking, and
    how long before the final (at the endpoint) its words were out as a partial."""
    first, between, lead = [], [], []
    started, partials = 0, []
    for at, e in events:
        if e.kind == SPEECH_STARTED:
            started, partials = e.audio_ms, []
        elif e.kind == PARTIAL:
            (between if partials else first).append(at - (partials[-1][0] if partials else started))
            partials.append((at, e.text))
        elif e.kind == FINAL:
            lead += [at - when for when, text in partials[-1:] if text == e.text]
    return {"first_partial_ms": statistics.median(first), "between_partials_ms": statistics.median(between),
            "between_partials_p90_ms": float(np.percentile(between, 90)), "between_partials_max_ms": max(between),
            "final_as_partial_before_ms": statistics.median(lead), "finals_out_early": len(lead)}


def measure(n: int, log: Path) -> dict:
    asked = questions(n)
    speech = [spoken(q) for q in asked]
    stream = np.concatenate([part for s in speech for part in (silence(GAP_MS), s)] + [silence(GAP_MS)])
    transcriber = WhisperTranscriber(threads=1)
    long_speech = np.concatenate(speech)
    passes = {f"{s} s": pass_ms(transcriber, long_speech, s) for s in (2, 5, 10, 20)}
    audio_s = len(stream) / ASR_SAMPLE_RATE
    with_partials, cpu_partials = heard(stream, transcriber, partials=True)
    _, cpu_finals = heard(stream, transcriber, partials=False)
    finals = [e.text for _, e in with_partials if e.kind == FINAL]
    errors = sum(word_errors(q, f) for q, f in zip(asked, finals)) if len(finals) == len(asked) else None
    return {
        "questions": n, "audio_s": round(audio_s, 1), "speech_s": round(len(long_speech) / ASR_SAMPLE_RATE, 1),
        "passes_on_one_thread": passes,
        "cpu_s_per_audio_s": {"partials": round(cpu_partials / audio_s, 3), "finals_only": round(cpu_finals / audio_s, 3),
                              "triton_real_time": round(triton_cpu_s(stream, log) / audio_s, 3)},
        "cadence": cadence(with_partials),
        "utterances": len(finals), "word_errors": errors, "words": sum(len(words(q)) for q in asked),
        "misheard": [(q, f) for q, f in zip(asked, finals) if word_errors(q, f)],
    }


def table(results: dict) -> str:
    passes = ", ".join(f"{k}: {v['cpu_ms']} ms ({v['wall_ms']}; encoder {v['encoder_s']} s)"
                       for k, v in results["passes_on_one_thread"].items())
    cpu, timing = results["cpu_s_per_audio_s"], results["cadence"]
    wer = "n/a" if results["word_errors"] is None else f"{results['word_errors'] / results['words']:.1%}"
    rows = [
        ("questions (chitchat, the embedded voice)", f"{results['questions']}: {results['speech_s']} s of speech in "
                                                    f"{results['audio_s']} s of audio"),
        ("a pass on one thread, CPU ms (wall ms) by speech heard", passes),
        ("CPU s per audio s: in Triton, in real time, with partials", cpu["triton_real_time"]),
        ("CPU s per audio s: in process, with partials", cpu["partials"]),
        ("CPU s per audio s: in process, finals only", cpu["finals_only"]),
        ("speech start → first partial (audio ms, median)", timing["first_partial_ms"]),
        ("between partials (audio ms, median / p90 / max)",
         f"{timing['between_partials_ms']} / {timing['between_partials_p90_ms']:.0f} / {timing['between_partials_max_ms']}"),
        ("the final's words out as a partial, before the final (audio ms, median)",
         f"{timing['final_as_partial_before_ms']} ({timing['finals_out_early']} of {results['utterances']} finals)"),
        ("word error rate of the finals", f"{wer} ({results['word_errors']} of {results['words']} words)"),
    ]
    return "\n".join(["| measure | value |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.voice.asr", description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("perf/results/asr"))
    args = parser.parse_args(argv)
    if os.environ.get("OMP_NUM_THREADS") != "1":
        print("run it as asr's shim runs Whisper: OMP_NUM_THREADS=1 python -m perf.voice.asr", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    results = measure(args.questions, args.out / "tritonserver.log")
    (args.out / "asr.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "asr.md").write_text(table(results))
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
