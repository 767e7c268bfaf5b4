"""perf.speech.runtimes times the voice's graphs at each of onnxruntime's optimisation levels."""

import numpy as np

from perf.speech import runtimes
from perf.tools.workloads import harvard_sentences
from python_backends.piper import engines
from python_backends.piper import voice as v


def test_each_level_speaks_the_same_sentence_as_the_default_within_a_hair_and_costs_cpu():
    voice = v.load_voice()
    acoustic = engines.AcousticEngine(voice, 1)
    texts = harvard_sentences()[:1]
    reference, _ = runtimes.synthesize(voice, acoustic, texts, runtimes.LEVELS["all (default)"])
    for level in runtimes.LEVELS.values():
        audio, cpu_s = runtimes.synthesize(voice, acoustic, texts, level)
        assert cpu_s > 0 and audio[0].size == reference[0].size  # a seed: the same durations
        assert runtimes.snr_db(reference[0], audio[0]) > 60


def test_snr_is_infinite_for_identical_audio_and_falls_with_noise():
    pcm = np.sin(np.linspace(0, 100, 22050)).astype(np.float32)
    assert runtimes.snr_db(pcm, pcm) == float("inf")
    assert 19 < runtimes.snr_db(pcm, pcm + 0.1 * pcm) < 21
