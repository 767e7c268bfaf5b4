"""onnxruntime's graph optimisation levels on this host: what each costs per audio second.

    python -m perf.speech.runtimes [--sentences 10] [--rounds 3]

The embedded voice's three graphs (prior, flow, decoder) on one intra-op thread, as the
stages run them, at each level, interleaved round by round: CPU ms per audio second of
whole-sentence synthesis (Harvard sentences, Piper's own noise, a seed) per round and
level, and each level's audio against the default level's (min SNR over the sentences:
inf is bit-identical, -inf a duration moved). A level is worth choosing on a host only
where it is cheaper in every round and its audio is the default's.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import onnxruntime as ort

from contract.text import Sentence
from perf.tools.workloads import harvard_sentences
from python_backends.piper import engines
from python_backends.piper import voice as v
from python_backends.piper.inputs import VoiceParams

LEVELS = {
    "all (default)": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}
SEED = 7


def synthesize(voice: v.Voice, acoustic: engines.AcousticEngine, texts: list[str],
               level: ort.GraphOptimizationLevel) -> tuple[list[np.ndarray], float]:
    """Each sentence's audio on graphs at `level`, and the CPU seconds it took."""
    prior, flow, decoder = (engines.session(voice.graphs[graph], 1, level) for graph in ("prior", "flow", "decoder"))
    graphs = engines.AcousticGraphs(1, prior, flow)
    d = acoustic.default_params()
    params = VoiceParams(d.length_scale, d.noise_scale, d.noise_w, seed=SEED)
    started, audio = time.process_time(), []
    for text in texts:
        prior = acoustic.prior(Sentence(0, len(text), text), params, graphs=graphs)
        latent = acoustic.flow(prior, 0, prior.frames, graphs)
        (pcm,) = decoder.run(None, {v.LATENT_OUT: latent[None]})
        audio.append(pcm.ravel())
    return audio, time.process_time() - started


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    """`other` against `reference`: -inf where their lengths differ (a duration moved)."""
    if reference.shape != other.shape:
        return float("-inf")
    noise = float(np.sum((reference - other) ** 2))
    return 10 * np.log10(float(np.sum(reference**2)) / noise) if noise else float("inf")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.speech.runtimes", description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    voice = v.load_voice()
    acoustic = engines.AcousticEngine(voice, 1)
    texts = harvard_sentences()[: args.sentences]
    costs: dict[str, list[float]] = {name: [] for name in LEVELS}
    fidelity: dict[str, float] = {}
    reference = None
    for _ in range(args.rounds):
        for name, level in LEVELS.items():
            audio, cpu_s = synthesize(voice, acoustic, texts, level)
            reference = reference or audio
            costs[name].append(1000 * cpu_s / (sum(a.size for a in audio) / voice.sample_rate))
            fidelity[name] = min(snr_db(r, a) for r, a in zip(reference, audio))
    print(f"onnxruntime {ort.__version__}, {args.sentences} sentences, one thread, {args.rounds} interleaved rounds\n")
    print("| level | CPU ms per audio second, by round | min SNR against the default (dB) |\n|---|---|---|")
    for name in LEVELS:
        print(f"| {name} | {', '.join(f'{c:.1f}' for c in costs[name])} | {fidelity[name]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
