"""perf.speech.runtimes times the voice's graphs at each of onnxruntime's optimisation levels."""

import numpy as np

from perf.speech import runtimes
from perf.tools.workloads import harvard_sentences
from python_backends.piper import engines
from python_backends.piper import voice as v


def test_each_level_speaks_the_sentence_and_costs_cpu_and_the_default_speaks_it_again_alike():
    voice = v.load_voice()
    acoustic = engines.AcousticEngine(voice, 1)
    texts = harvard_sentences()[:1]
    default = runtimes.LEVELS["all (default)"]
    reference, _ = runtimes.synthesize(voice, acoustic, texts, default)
    again, _ = runtimes.synthesize(voice, acoustic, texts, default)
    assert runtimes.snr_db(reference[0], again[0]) > 60  # a seed: the same noise
    for level in runtimes.LEVELS.values():
        audio, cpu_s = runtimes.synthesize(voice, acoustic, texts, level)
        # Another level's rounding may move a phoneme's duration by a frame on some CPU.
        assert cpu_s > 0 and abs(audio[0].size - reference[0].size) <= 0.02 * reference[0].size


def test_snr_is_infinite_for_identical_audio_and_falls_with_noise():
    pcm = np.sin(np.linspace(0, 100, 22050)).astype(np.float32)
    assert runtimes.snr_db(pcm, pcm) == float("inf")
    assert 19 < runtimes.snr_db(pcm, pcm + 0.1 * pcm) < 21
    assert runtimes.snr_db(pcm, pcm[:-256]) == float("-inf")  # a frame shorter: not the same audio
