"""The split graphs, and the tts engine over them in process (no Triton)."""

import asyncio
import math
from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

from contract import models as c
from contract.models import VOCODER_BUCKETS
from contract.text import split_sentences
from contract.voices import EMBEDDED, voice_info
from perf.tools.workloads import workload
from python_backends import chunking
from python_backends.inputs import read_chunk_params
from python_backends.piper.engines import AcousticEngine, VocoderEngine
from python_backends.piper.inputs import VoiceParams
from python_backends.piper.pipeline import LatentSentence, stream_pcm
from python_backends.piper.voice import embedded_voice_files, load_voice
from python_backends.scheduler import DeadlineScheduler, PlaybackClock
from tests.audio import snr_db
from tests.engine_stages import EngineStages, stream_request, strings, whole_latent


@pytest.fixture(scope="module")
def voice():
    return load_voice()


@pytest.fixture(scope="module")
def acoustic(voice):
    return AcousticEngine(voice)


@pytest.fixture(scope="module")
def vocoder(voice):
    return VocoderEngine(voice)


def test_the_catalog_knows_the_embedded_voice_as_its_wheel_describes_it(voice):
    assert voice_info(voice.name, voice.config) == EMBEDDED
    assert voice.sample_rate == EMBEDDED.sample_rate and voice.espeak_voice == EMBEDDED.espeak


def test_split_graphs_equal_the_whole_piper_model_without_noise(acoustic, vocoder):
    sentence = split_sentences("The birch canoe slid on the smooth planks.")[0]
    params = VoiceParams(length_scale=1.0, noise_scale=0.0, noise_w=0.0)
    ours = acoustic.latent(sentence, params)
    whole = ort.InferenceSession(str(embedded_voice_files()[0]), providers=["CPUExecutionProvider"])
    ids = acoustic.ids(sentence)[None, :]
    scales = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    (expected,) = whole.run(None, {"input": ids, "input_lengths": np.array([ids.shape[1]]), "scales": scales})
    audio = vocoder.vocode(ours.latent[None])[0]
    assert audio.size == expected.size == ours.latent.shape[1] * 256
    assert snr_db(expected.reshape(-1), audio) > 100
    assert ours.durations.sum() == ours.latent.shape[1]
    assert ours.durations.size == ids.shape[1]


def test_seed_makes_synthesis_repeatable(acoustic):
    sentence = split_sentences("Glue the sheet to the dark blue background.")[0]
    params = acoustic.default_params()
    a = acoustic.latent(sentence, VoiceParams(params.length_scale, params.noise_scale, params.noise_w, seed=3))
    b = acoustic.latent(sentence, VoiceParams(params.length_scale, params.noise_scale, params.noise_w, seed=3))
    c = acoustic.latent(sentence, VoiceParams(params.length_scale, params.noise_scale, params.noise_w, seed=4))
    assert np.array_equal(a.latent, b.latent)
    assert a.latent.shape != c.latent.shape or not np.allclose(a.latent, c.latent)


def test_a_seeded_sentence_sounds_the_same_alone_or_within_a_text(acoustic):
    params = VoiceParams(1.0, 0.667, 0.8, seed=11)
    text = "Rice is often served in round bowls. The juice of lemons makes fine punch."
    within = acoustic.latent(split_sentences(text)[1], params)
    alone = acoustic.latent(split_sentences("The juice of lemons makes fine punch.")[0], params)
    assert np.array_equal(within.latent, alone.latent)


def test_the_flow_in_pieces_matches_the_whole_sentence(acoustic):
    params = replace(acoustic.default_params(), seed=3)
    sentence = split_sentences(workload("short"))[0]
    prior = acoustic.prior(sentence, params)
    whole = acoustic.latent(sentence, params).latent
    pieces = np.concatenate([acoustic.flow(prior, 0, 32), acoustic.flow(prior, 32, prior.frames)], axis=1)
    assert pieces.shape == whole.shape == (whole.shape[0], prior.frames)
    assert snr_db(whole, pieces) > 80  # without FLOW_CONTEXT: about 25 dB


@pytest.mark.parametrize("length_scale", [0.25, 0.5, 0.9, 2.0, 4.0])
def test_length_scale_stretches_the_audio_exactly(acoustic, length_scale):
    sentence = split_sentences("Rice is often served in round bowls.")[0]
    stretched = acoustic.latent(sentence, VoiceParams(length_scale, 0.0, 0.0))
    normal = acoustic.latent(sentence, VoiceParams(1.0, 0.0, 0.0))
    assert abs(stretched.latent.shape[1] - normal.latent.shape[1] * length_scale) <= 0.5
    assert stretched.durations.sum() == stretched.latent.shape[1]


def latents(acoustic, text, seed=1):
    d = acoustic.default_params()
    params = VoiceParams(d.length_scale, d.noise_scale, d.noise_w, seed)
    return [acoustic.latent(s, params) for s in split_sentences(text)]


def test_a_sentence_comes_in_a_head_and_the_rest_the_head_with_its_timing(acoustic):
    params = replace(acoustic.default_params(), seed=3)
    sentence = split_sentences(workload("short"))[0]
    whole = acoustic.latent(sentence, params)

    async def collect(head):
        return [piece async for piece in acoustic.pieces(sentence.text, params, head)]

    head, rest = asyncio.run(collect(32))
    assert head.frames.shape[1] == 32 and head.sentence_frames == whole.latent.shape[1]
    assert np.array_equal(head.durations, whole.durations) and head.words == tuple(whole.words)
    assert rest.durations.size == 0 and rest.words == ()
    assert snr_db(whole.latent, np.concatenate([head.frames, rest.frames], axis=1)) > 80
    (alone,) = asyncio.run(collect(0))
    assert np.array_equal(alone.frames, whole.latent)


def test_a_head_asked_enough_threads_runs_on_the_head_graphs_the_rest_on_one_thread(voice):
    engine = AcousticEngine(voice, 1, head_threads=2)
    assert [engine.head_graphs(t).threads for t in (1, 2, 8)] == [1, 2, 2]
    assert engine.head_graphs(2).prior.get_session_options().intra_op_num_threads == 2
    assert AcousticEngine(voice).head_graphs(8).threads == 1  # no head graphs of its own
    runs = []
    for graphs in (engine.head_graphs(1), engine.head_graphs(2)):
        for name in ("prior", "flow"):
            session = getattr(graphs, name)
            session.run = lambda *a, run=session.run, key=(name, graphs.threads): runs.append(key) or run(*a)
    params = replace(engine.default_params(), seed=3)
    text = split_sentences(workload("paragraph"))[0].text

    async def collect(threads):
        return [piece.frames async for piece in engine.pieces(text, params, 32, None, (), threads)]

    one = asyncio.run(collect(1))
    assert runs == [("prior", 1), ("flow", 1), ("flow", 1)]
    runs.clear()
    two = asyncio.run(collect(2))
    assert runs == [("prior", 2), ("flow", 2), ("flow", 1)]
    assert all(snr_db(a, b) > 100 for a, b in zip(one, two, strict=True))


def synthesize_all(stages, inputs, cancel_after=None, pad_to_buckets=False):
    """The chunks of a tts request of `inputs`, unloaded."""
    return asyncio.run(stream_request(stages, inputs, cancel_after=cancel_after, pad_to_buckets=pad_to_buckets))


def test_synthesized_text_matches_whole_sentence_vocoding(acoustic, vocoder):
    text, seed = workload("paragraph"), np.array([1], np.int64)
    chunks = synthesize_all(EngineStages(acoustic, vocoder), {c.TEXT: strings(text), c.SEED: seed})
    sentences = latents(acoustic, text)
    whole = np.concatenate([vocoder.vocode(s.latent[None])[0] for s in sentences])
    assert snr_db(whole, np.concatenate([chunk.pcm for chunk in chunks])) >= 60
    assert chunks[0].pcm.size == 8 * 256
    assert sorted({chunk.sentence_index for chunk in chunks}) == list(range(len(sentences)))


def test_sentences_sent_as_sentences_sound_as_within_the_text(acoustic, vocoder):
    text, seed = workload("short"), np.array([7], np.int64)
    cut = [s.text for s in split_sentences(text)]
    stages = EngineStages(acoustic, vocoder)
    from_text = synthesize_all(stages, {c.TEXT: strings(text), c.SEED: seed})
    from_sentences = synthesize_all(stages, {c.SENTENCES: strings(*cut), c.SEED: seed})
    assert np.array_equal(np.concatenate([x.pcm for x in from_text]), np.concatenate([x.pcm for x in from_sentences]))
    assert [x.sentence_index for x in from_sentences] == [x.sentence_index for x in from_text]


def test_cancellation_stops_issuing_vocoder_work(acoustic, vocoder):
    inputs = {c.TEXT: strings(workload("paragraph"))}
    stages = EngineStages(acoustic, vocoder)
    chunks = synthesize_all(stages, inputs, cancel_after=2)
    assert len(chunks) <= 4 and len(stages.calls) <= 4
    full = EngineStages(acoustic, vocoder)
    synthesize_all(full, inputs)
    assert len(full.calls) > 10


def test_windows_are_padded_to_buckets_when_asked(acoustic, vocoder):
    inputs = {c.TEXT: strings(workload("short")), c.SEED: np.array([1], np.int64)}
    padded, bare = EngineStages(acoustic, vocoder), EngineStages(acoustic, vocoder)
    synthesize_all(padded, inputs, pad_to_buckets=True)
    synthesize_all(bare, inputs)
    assert padded.calls and set(padded.calls) <= set(VOCODER_BUCKETS)
    assert not set(bare.calls) <= set(VOCODER_BUCKETS)
    assert all(b <= p for b, p in zip(bare.calls, padded.calls))


async def as_stream(items):
    for index, s in enumerate(items):
        yield LatentSentence(index, whole_latent(s.latent))


def stream_latents(sentences, stages, chunking):
    """The PCM of whole latents streamed in chunks."""
    async def collect():
        chunks = stream_pcm(as_stream(sentences), stages, DeadlineScheduler(2), chunking, PlaybackClock(22050))
        return np.concatenate([chunk.pcm async for chunk in chunks])

    return asyncio.run(collect())


def test_less_context_is_measurably_worse(acoustic, vocoder):
    sentences = latents(acoustic, workload("short"))
    whole = np.concatenate([vocoder.vocode(s.latent[None])[0] for s in sentences])
    chunking = replace(read_chunk_params({}, c.CHUNK_PARAMS), left_context=0, right_context=0)
    bare = stream_latents(sentences, EngineStages(acoustic, vocoder), chunking)
    assert snr_db(whole, bare) < 40


def test_a_stream_ahead_of_its_listener_vocodes_fewer_longer_windows_more_exactly(acoustic, vocoder, monkeypatch):
    """In process the engines run many times faster than real time, so a stream soon has
    seconds of audio in hand and its chunks grow; with growth switched off (a threshold
    no stream reaches) they keep their usual size. The grown stream is at least as close
    to whole-sentence vocoding."""
    text, inputs = workload("paragraph"), {c.TEXT: strings(workload("paragraph")), c.SEED: np.array([1], np.int64)}
    whole = np.concatenate([vocoder.vocode(s.latent[None])[0] for s in latents(acoustic, text)])
    ahead = EngineStages(acoustic, vocoder)
    grown = np.concatenate([x.pcm for x in synthesize_all(ahead, inputs)])
    monkeypatch.setattr(chunking, "GROW_AHEAD_S", math.inf)
    usual = EngineStages(acoustic, vocoder)
    plain = np.concatenate([x.pcm for x in synthesize_all(usual, inputs)])
    assert len(ahead.calls) < len(usual.calls)
    assert sum(ahead.calls) < sum(usual.calls)  # fewer context frames vocoded
    assert snr_db(whole, grown) >= snr_db(whole, plain) - 1 and snr_db(whole, grown) >= 60
