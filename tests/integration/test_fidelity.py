"""Every sentence streamed in chunks sounds as the same sentence synthesized whole.

For each Harvard sentence (shared/data/harvard.txt, as the benchmarks use it), spoken
alone and as the first, the middle and the last of a three-sentence text, at every first
chunk size the server chooses (small while unloaded, larger under load, a whole chunk
while other streams start together with it), the streamed
PCM of that sentence is compared with the sentence vocoded whole, without noise so both
are deterministic. A chunk boundary, a context too short or a flow head cut too close
shows as a local error in one sentence, which one SNR over a whole text would hide.
In process (the engines the Triton models wrap), so it runs without Triton.
"""

import asyncio

import numpy as np
import pytest

from contract import models as c
from contract.text import split_sentences
from perf.tools.workloads import harvard_sentences
from python_backends.piper.engines import AcousticEngine, VocoderEngine
from python_backends.piper.inputs import VoiceParams
from python_backends.piper.voice import load_voice
from tests.audio import snr_db
from tests.engine_stages import EngineStages, stream_request, strings

MIN_SNR_DB = 45
POSITIONS = ("first", "middle", "last")
NOISELESS = {c.NOISE_SCALE: np.array([0.0], np.float32), c.NOISE_W: np.array([0.0], np.float32)}


@pytest.fixture(scope="module")
def engines():
    voice = load_voice()
    return AcousticEngine(voice), VocoderEngine(voice)


@pytest.fixture(scope="module")
def whole(engines):
    """Each sentence's PCM, synthesized and vocoded whole, without noise."""
    acoustic, vocoder = engines
    params = VoiceParams(1.0, 0.0, 0.0)
    return {
        text: vocoder.vocode(acoustic.latent(split_sentences(text)[0], params).latent[None])[0]
        for text in harvard_sentences()
    }


def streamed(stages, texts, loaded, together):
    """Each text's streamed PCM, the texts all sent as one request's sentences."""

    async def one():
        chunks = await stream_request(stages, {c.SENTENCES: strings(*texts), **NOISELESS}, loaded=loaded,
                                      together=together)
        return [np.concatenate([x.pcm for x in chunks if x.sentence_index == i]) for i in range(len(texts))]

    return one()


def requests(sentences):
    """Every sentence alone, and in three-sentence texts that put each sentence first,
    in the middle and last once: [(label, texts)]."""
    n = len(sentences)
    alone = [("alone", [s]) for s in sentences]
    return alone + [("text", [sentences[(k + i) % n] for i in range(3)]) for k in range(n)]


@pytest.mark.parametrize(("loaded", "together"), [(False, False), (True, False), (True, True)],
                         ids=["unloaded", "loaded", "started together"])
def test_every_sentence_in_every_position_matches_its_whole_synthesis(engines, whole, loaded, together):
    stages = EngineStages(*engines)
    asked = requests(list(whole))

    async def all_requests():
        return await asyncio.gather(*(streamed(stages, texts, loaded, together) for _, texts in asked))

    results = asyncio.run(all_requests())
    snrs = {}
    for (label, texts), pcms in zip(asked, results):
        for position, text, pcm in zip(POSITIONS if label == "text" else ("alone",), texts, pcms):
            snrs[(position, text)] = snr_db(whole[text], pcm)
    assert len(snrs) == 4 * len(whole)
    worst = sorted((snr, position, text) for (position, text), snr in snrs.items())[:3]
    assert worst[0][0] >= MIN_SNR_DB, worst
