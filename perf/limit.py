"""The compute limit: what this machine's cores synthesize with nothing in the way.

Whole-utterance synthesis in process with onnxruntime (each sentence's latent frames
vocoded in one call, no chunks, no context frames, no Triton, no network), one process
per core, each with one onnxruntime thread, all synthesizing the same text over and
over. Its audio-seconds per wall second are the ceiling a server's throughput is
measured against.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from multiprocessing.synchronize import Barrier
from queue import Empty

START_TIMEOUT_S = 120.0  # spawning, importing and loading the graphs, on a busy machine


def _utterance(acoustic, vocoder, sentences, params) -> tuple[float, float]:
    """(audio s, wall s) of one whole-utterance synthesis."""
    start, samples = time.perf_counter(), 0
    for i, sentence in enumerate(sentences):
        latent = acoustic.synthesize(i, sentence, params).latent
        samples += vocoder.vocode(latent[None]).shape[1]
    return samples / acoustic.voice.sample_rate, time.perf_counter() - start


def _worker(texts: dict[str, str], seconds: float, barrier: Barrier, results: multiprocessing.Queue) -> None:
    """Per workload: wait for every core to be ready, synthesize for `seconds`, report
    (workload, audio s, elapsed s, CPU s, per-utterance RTFs)."""
    from python_backends.engines import AcousticEngine, VocoderEngine
    from python_backends.text import split_sentences
    from python_backends.voice import load_voice

    voice = load_voice()
    acoustic, vocoder = AcousticEngine(voice, threads=1), VocoderEngine(voice, threads=1)
    params = acoustic.default_params()
    for name, text in texts.items():
        sentences = split_sentences(text)
        _utterance(acoustic, vocoder, sentences, params)  # warm-up: first runs are slow
        barrier.wait(START_TIMEOUT_S)
        start, cpu, audio, rtfs = time.perf_counter(), time.process_time(), 0.0, []
        while time.perf_counter() - start < seconds:
            audio_s, wall_s = _utterance(acoustic, vocoder, sentences, params)
            audio, rtfs = audio + audio_s, rtfs + [wall_s / audio_s]
        results.put((name, audio, time.perf_counter() - start, time.process_time() - cpu, rtfs))


def compute_limit(texts: dict[str, str], seconds: float, cores: int | None = None) -> dict[str, dict]:
    """Per workload: the limit in audio-s/s (sum over cores of each one's rate), in
    audio-s per CPU-s, and the median whole-utterance RTF on one core."""
    cores = cores or os.cpu_count() or 1
    context = multiprocessing.get_context("spawn")  # no onnxruntime state shared by fork
    barrier, results = context.Barrier(cores), context.Queue()
    workers = [context.Process(target=_worker, args=(texts, seconds, barrier, results)) for _ in range(cores)]
    for w in workers:
        w.start()
    try:
        rows = [results.get(timeout=START_TIMEOUT_S + seconds * len(texts) * 3) for _ in range(cores * len(texts))]
    except Empty:
        raise RuntimeError("the compute-limit workers did not report") from None
    finally:
        for w in workers:
            w.join(5)
            if w.is_alive():
                w.kill()
    limit = {}
    for name in texts:
        mine = [(audio, elapsed, cpu, rtfs) for n, audio, elapsed, cpu, rtfs in rows if n == name]
        limit[name] = {
            "cores": cores,
            "audio_s_per_s": round(sum(audio / elapsed for audio, elapsed, _, _ in mine), 2),
            # What a CPU-second buys, whatever else the machine runs meanwhile.
            "audio_s_per_cpu_s": round(sum(audio for audio, *_ in mine) / sum(cpu for _, _, cpu, _ in mine), 2),
            "rtf_one_core_p50": round(statistics.median(rtf for *_, rtfs in mine for rtf in rtfs), 4),
            "seconds": seconds,
        }
    return limit
