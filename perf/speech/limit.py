"""The compute limit: what this machine's cores synthesize with nothing in the way.

Whole-utterance synthesis in process with onnxruntime (each sentence's latent frames
vocoded in one call, no chunks, no context frames, no Triton, no network), one process
per core, each with one onnxruntime thread, all synthesizing the same text over and
over. Its audio-seconds per wall second are the ceiling a server's throughput is
measured against; its CPU split between the stages is what a server's split is read
against.

The floor of time to first audio (`ttfp_floor`): the compute a first packet waits for,
timed the same way, in process, with nothing else in the way.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from collections import defaultdict
from multiprocessing.synchronize import Barrier
from queue import Empty

START_TIMEOUT_S = 120.0  # spawning, importing and loading the graphs, on a busy machine


def _utterance(acoustic, vocoder, sentences, params) -> tuple[float, float, float]:
    """(audio s, wall s, acoustic CPU s) of one whole-utterance synthesis."""
    start, samples, acoustic_cpu = time.perf_counter(), 0, 0.0
    for sentence in sentences:
        cpu = time.process_time()
        latent = acoustic.latent(sentence, params).latent
        acoustic_cpu += time.process_time() - cpu
        samples += vocoder.vocode(latent[None]).shape[1]
    return samples / acoustic.voice.sample_rate, time.perf_counter() - start, acoustic_cpu


def _worker(texts: dict[str, str], seconds: float, barrier: Barrier, results: multiprocessing.Queue) -> None:
    """Per workload: wait for every core to be ready, synthesize for `seconds`, report
    (workload, audio s, elapsed s, CPU s, acoustic CPU s, per-utterance RTFs)."""
    from contract.text import split_sentences
    from python_backends.piper.engines import AcousticEngine, VocoderEngine
    from python_backends.piper.voice import load_voice

    voice = load_voice()
    acoustic, vocoder = AcousticEngine(voice, threads=1), VocoderEngine(voice, threads=1)
    params = acoustic.default_params()
    for name, text in texts.items():
        sentences = split_sentences(text)
        _utterance(acoustic, vocoder, sentences, params)  # warm-up: first runs are slow
        barrier.wait(START_TIMEOUT_S)
        start, cpu, audio, acoustic_cpu, rtfs = time.perf_counter(), time.process_time(), 0.0, 0.0, []
        while time.perf_counter() - start < seconds:
            audio_s, wall_s, acoustic_s = _utterance(acoustic, vocoder, sentences, params)
            audio, acoustic_cpu, rtfs = audio + audio_s, acoustic_cpu + acoustic_s, rtfs + [wall_s / audio_s]
        results.put((name, audio, time.perf_counter() - start, time.process_time() - cpu, acoustic_cpu, rtfs))


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
        mine = [row[1:] for row in rows if row[0] == name]
        audio, cpu, acoustic_cpu = (sum(row[i] for row in mine) for i in (0, 2, 3))
        limit[name] = {
            "cores": cores,
            "audio_s_per_s": round(sum(audio / elapsed for audio, elapsed, *_ in mine), 2),
            # What a CPU-second buys, whatever else the machine runs meanwhile.
            "audio_s_per_cpu_s": round(audio / cpu, 2),
            "cpu_ms_per_audio_s": {"acoustic": round(1000 * acoustic_cpu / audio, 1),
                                   "vocoder": round(1000 * (cpu - acoustic_cpu) / audio, 1)},
            "rtf_one_core_p50": round(statistics.median(rtf for *_, rtfs in mine for rtf in rtfs), 4),
            "seconds": seconds,
        }
    return limit


def _timed(steps: dict[str, list[float]], step: str, call, *args):
    """call(*args), its wall time in ms appended to steps[step]."""
    start = time.perf_counter()
    result = call(*args)
    steps[step].append(1000 * (time.perf_counter() - start))
    return result


def _ttfp_floor_worker(text: str, runs: int, results: multiprocessing.Queue) -> None:
    from contract.models import CHUNK_PARAMS
    from contract.text import split_sentences
    from python_backends.chunking import head_frames
    from python_backends.inputs import read_chunk_params
    from python_backends.piper.engines import DEFAULT_HEAD_THREADS, AcousticEngine, VocoderEngine
    from python_backends.piper.voice import load_voice

    voice = load_voice()
    acoustic = AcousticEngine(voice, threads=1, head_threads=DEFAULT_HEAD_THREADS)
    vocoder, both_cores = VocoderEngine(voice, threads=1), acoustic.head_graphs(DEFAULT_HEAD_THREADS)
    params, first = acoustic.default_params(), split_sentences(text)[0]
    chunking = read_chunk_params({}, CHUNK_PARAMS)  # the defaults a client gets
    window = chunking.initial_frames + chunking.right_context
    head = head_frames(chunking.initial_frames, chunking.frames, chunking.right_context)

    def once(steps: dict[str, list[float]]) -> None:
        latent = _timed(steps, "acoustic", acoustic.latent, first, params).latent
        _timed(steps, "whole_vocoder", vocoder.vocode, latent[None])
        prior = _timed(steps, "prior", acoustic.prior, first, params)
        _timed(steps, "head_flow", acoustic.flow, prior, 0, head)
        prior = _timed(steps, "prior_both_cores", acoustic.prior, first, params, (), both_cores)
        _timed(steps, "head_flow_both_cores", acoustic.flow, prior, 0, head, both_cores)
        _timed(steps, "first_window", vocoder.vocode, latent[None, :, :window])

    once(defaultdict(list))  # warm-up: first runs are slow
    steps: dict[str, list[float]] = defaultdict(list)
    for _ in range(runs):
        once(steps)
    results.put({step: round(statistics.median(ms), 1) for step, ms in steps.items()} | {"head_frames": head, "window_frames": window})


def ttfp_floor(text: str, runs: int = 15) -> dict:
    """Medians (ms) of the compute before a first packet of `text`, in process on one
    core: the first sentence's whole acoustic stage, its prior, the flow of its first
    head_frames frames, and one first vocoder window (the default first chunk and its
    look-ahead); the prior and the head's flow also on two threads ("_both_cores").
    "whole_ms" is the floor as the first sentence's acoustic stage plus the first window;
    "pieces_ms" is what this server's first packet waits for on one core, the prior, the
    head's flow and the first window; "lone_ms" the same with the prior and the head's
    flow on both cores, as a lone stream's are run (the 1-client floor); "t_sent_ms" is
    T_sent (DESIGN.md), the first sentence synthesized whole, what a sentence-streaming
    server spends before its first audio."""
    context = multiprocessing.get_context("spawn")  # as for the limit: a clean process
    results = context.Queue()
    worker = context.Process(target=_ttfp_floor_worker, args=(text, runs, results))
    worker.start()
    try:
        floor = results.get(timeout=START_TIMEOUT_S)
    except Empty:
        raise RuntimeError("the TTFP-floor worker did not report") from None
    finally:
        worker.join(5)
        if worker.is_alive():
            worker.kill()
    floor["whole_ms"] = round(floor["acoustic"] + floor["first_window"], 1)
    floor["t_sent_ms"] = round(floor["acoustic"] + floor["whole_vocoder"], 1)
    floor["pieces_ms"] = round(floor["prior"] + floor["head_flow"] + floor["first_window"], 1)
    floor["lone_ms"] = round(floor["prior_both_cores"] + floor["head_flow_both_cores"] + floor["first_window"], 1)
    return floor
