"""The split graphs and the streaming core, in process (no Triton)."""

import asyncio
from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

from perf.workloads import workload
from python_backends import contract as c
from python_backends.contract import VOCODER_BUCKETS
from python_backends.engines import AcousticEngine, VocoderEngine, VoiceParams
from python_backends.requests import ChunkParams, read_chunk_params
from python_backends.scheduler import PlaybackClock
from python_backends.streaming import (
    SECONDS_PER_CHAR, Latent, LatentPiece, LatentSentence, PcmChunk, latent_sentence, sentence_latents, stream_pcm,
    tts_outputs,
)
from python_backends.text import split_sentences
from python_backends.voice import embedded_voice_files, load_voice
from tests.audio import snr_db


@pytest.fixture(scope="module")
def voice():
    return load_voice()


@pytest.fixture(scope="module")
def acoustic(voice):
    return AcousticEngine(voice)


@pytest.fixture(scope="module")
def vocoder(voice):
    return VocoderEngine(voice)


def test_split_graphs_equal_the_whole_piper_model_without_noise(acoustic, vocoder):
    sentence = split_sentences("The birch canoe slid on the smooth planks.")[0]
    params = VoiceParams(length_scale=1.0, noise_scale=0.0, noise_w=0.0)
    ours = acoustic.synthesize(0, sentence, params)
    whole = ort.InferenceSession(str(embedded_voice_files()[0]), providers=["CPUExecutionProvider"])
    ids = ours.phoneme_ids[None, :]
    scales = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    (expected,) = whole.run(None, {"input": ids, "input_lengths": np.array([ids.shape[1]]), "scales": scales})
    audio = vocoder.vocode(ours.latent[None])[0]
    assert audio.size == expected.size == ours.latent.shape[1] * 256
    assert snr_db(expected.reshape(-1), audio) > 100
    assert ours.durations.sum() == ours.latent.shape[1]
    assert ours.durations.size == ours.phoneme_ids.size


def test_seed_makes_synthesis_repeatable(acoustic):
    sentence = split_sentences("Glue the sheet to the dark blue background.")[0]
    params = acoustic.default_params()
    a = acoustic.synthesize(0, sentence, VoiceParams(params.length_scale, params.noise_scale, params.noise_w, seed=3))
    b = acoustic.synthesize(0, sentence, VoiceParams(params.length_scale, params.noise_scale, params.noise_w, seed=3))
    c = acoustic.synthesize(0, sentence, VoiceParams(params.length_scale, params.noise_scale, params.noise_w, seed=4))
    assert np.array_equal(a.latent, b.latent)
    assert a.latent.shape != c.latent.shape or not np.allclose(a.latent, c.latent)


def test_a_seeded_sentence_sounds_the_same_alone_or_within_a_text(acoustic):
    params = VoiceParams(1.0, 0.667, 0.8, seed=11)
    text = "Rice is often served in round bowls. The juice of lemons makes fine punch."
    within = acoustic.synthesize(1, split_sentences(text)[1], params)
    alone = acoustic.synthesize(0, split_sentences("The juice of lemons makes fine punch.")[0], params)
    assert np.array_equal(within.latent, alone.latent)


def test_the_flow_in_pieces_matches_the_whole_sentence(acoustic):
    params = replace(acoustic.default_params(), seed=3)
    sentence = split_sentences(workload("short"))[0]
    prior = acoustic.prior(0, sentence, params)
    whole = acoustic.synthesize(0, sentence, params).latent
    pieces = np.concatenate([acoustic.flow(prior, 0, 32), acoustic.flow(prior, 32, prior.frames)], axis=1)
    assert pieces.shape == whole.shape == (whole.shape[0], prior.frames)
    assert snr_db(whole, pieces) > 80  # without FLOW_CONTEXT: about 25 dB


def test_length_scale_stretches_the_audio(acoustic):
    sentence = split_sentences("Rice is often served in round bowls.")[0]
    slow = acoustic.synthesize(0, sentence, VoiceParams(2.0, 0.0, 0.0))
    normal = acoustic.synthesize(0, sentence, VoiceParams(1.0, 0.0, 0.0))
    assert 1.7 < slow.latent.shape[1] / normal.latent.shape[1] < 2.3


def latents(acoustic, text, seed=1):
    d = acoustic.default_params()
    params = VoiceParams(d.length_scale, d.noise_scale, d.noise_w, seed)
    return [acoustic.synthesize(i, s, params) for i, s in enumerate(split_sentences(text))]


async def as_stream(items):
    for s in items:
        yield LatentSentence(s.index, (s.sentence.start, s.sentence.end), Latent.whole(s.latent))


def run_stream(sentences, vocoder, calls=None, cancel_after=None, pad_to_buckets=False, **chunking):
    async def vocode(window, deadline):
        if calls is not None:
            calls.append(window.shape[1])
        await asyncio.sleep(0)
        return vocoder.vocode(window[None])[0]

    params = replace(read_chunk_params({}), **chunking)  # the defaults a client gets

    async def collect():
        out = []
        async for chunk in stream_pcm(
            as_stream(sentences), vocode, params, PlaybackClock(22050),
            is_cancelled=lambda: cancel_after is not None and len(out) >= cancel_after,
            pad_to_buckets=pad_to_buckets,
        ):
            out.append(chunk)
        return out

    return asyncio.run(collect())


def test_streamed_chunks_match_whole_sentence_vocoding(acoustic, vocoder):
    sentences = latents(acoustic, workload("paragraph"))
    chunks = run_stream(sentences, vocoder)
    streamed = np.concatenate([c.pcm for c in chunks])
    whole = np.concatenate([vocoder.vocode(s.latent[None])[0] for s in sentences])
    assert snr_db(whole, streamed) >= 60
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert [c.sample_offset for c in chunks] == list(np.cumsum([0] + [c.pcm.size for c in chunks[:-1]]))
    assert chunks[0].pcm.size == 8 * 256
    assert sorted({c.sentence_index for c in chunks}) == list(range(len(sentences)))


def stream_arriving_in_pieces(vocoder, latent: np.ndarray, head: int, rest):
    """Stream one sentence whose frames after `head` come later, by `rest(latent)`;
    return the log of vocoder calls and the arrival, and the PCM."""
    growing, log = Latent(*latent.shape), []
    growing.extend(latent[:, :head])

    async def vocode(window, deadline):
        log.append(("vocode", window.shape[1]))
        return vocoder.vocode(window[None])[0]

    async def sentences():
        yield LatentSentence(0, (0, 1), growing)

    async def later():
        await asyncio.sleep(0.05)
        log.append(("rest", None))
        rest(growing)

    async def collect():
        arrival = asyncio.ensure_future(later())
        try:
            return [c.pcm async for c in stream_pcm(sentences(), vocode, read_chunk_params({}), PlaybackClock(22050))]
        finally:
            await arrival

    return log, np.concatenate(asyncio.run(collect()))


def test_a_sentence_is_vocoded_from_its_first_frames_before_the_rest_arrives(acoustic, vocoder):
    latent = latents(acoustic, workload("short"))[0].latent
    log, pcm = stream_arriving_in_pieces(vocoder, latent, 32, lambda growing: growing.extend(latent[:, 32:]))
    assert log[0] == ("vocode", 16) and log.index(("rest", None)) >= 1  # the first chunk did not wait
    assert snr_db(vocoder.vocode(latent[None])[0], pcm) > 60


def test_the_rest_of_a_sentence_failing_ends_the_stream_with_that_error(acoustic, vocoder):
    latent = latents(acoustic, workload("short"))[0].latent
    with pytest.raises(RuntimeError, match="acoustic down"):
        stream_arriving_in_pieces(vocoder, latent, 32, lambda growing: growing.fail(RuntimeError("acoustic down")))


def test_less_context_is_measurably_worse(acoustic, vocoder):
    sentences = latents(acoustic, workload("short"))
    whole = np.concatenate([vocoder.vocode(s.latent[None])[0] for s in sentences])
    bare = np.concatenate([c.pcm for c in run_stream(sentences, vocoder, left_context=0, right_context=0)])
    assert snr_db(whole, bare) < 40


def test_windows_are_padded_to_buckets_when_asked(acoustic, vocoder):
    sentences = latents(acoustic, workload("short"))
    padded, bare = [], []
    run_stream(sentences, vocoder, calls=padded, pad_to_buckets=True)
    run_stream(sentences, vocoder, calls=bare)
    assert padded and set(padded) <= set(VOCODER_BUCKETS)
    assert not set(bare) <= set(VOCODER_BUCKETS)
    assert all(b <= p for b, p in zip(bare, padded))


def test_cancellation_stops_issuing_vocoder_work(acoustic, vocoder):
    sentences = latents(acoustic, workload("paragraph"))
    calls = []
    chunks = run_stream(sentences, vocoder, calls=calls, cancel_after=2)
    full = []
    run_stream(sentences, vocoder, calls=full)
    assert len(full) > 10
    assert len(chunks) <= 4 and len(calls) <= 4


def test_a_vocoder_failure_ends_the_stream_with_that_error(acoustic):
    sentences = latents(acoustic, workload("short"))

    async def failing(window, deadline):
        raise RuntimeError("vocoder down")

    async def collect():
        chunking = ChunkParams(8, 64, 16, 8)
        return [c async for c in stream_pcm(as_stream(sentences), failing, chunking, PlaybackClock(22050))]

    with pytest.raises(RuntimeError, match="vocoder down"):
        asyncio.run(collect())


def test_a_sentence_is_due_after_the_likely_audio_of_the_text_before_it():
    text = "A first sentence of some length. A second one."
    sentences = split_sentences(text)
    clock = PlaybackClock(22050, now=lambda: 10.0)
    deadlines = []

    async def synthesize(index, sentence, deadline):
        deadlines.append(deadline)
        return LatentSentence(index, (sentence.start, sentence.end), Latent.whole(np.zeros((1, 1), np.float32)))

    async def collect():
        return [s.index async for s in sentence_latents(sentences, synthesize, clock)]

    assert asyncio.run(collect()) == [0, 1]
    first, second = deadlines  # both asked for before any audio was planned
    assert second - first == pytest.approx(sentences[1].start * SECONDS_PER_CHAR, abs=1e-3) and second - first > 1


def test_sentences_are_synthesized_in_order_a_bounded_way_ahead():
    sentences = split_sentences("One. Two. Three. Four. Five. Six.")
    started = []
    taken = []

    async def synthesize(index, sentence, deadline):
        started.append(index)
        await asyncio.sleep(0.01 * (6 - index))  # later sentences finish first
        return LatentSentence(index, (sentence.start, sentence.end), Latent.whole(np.zeros((1, 1), np.float32)))

    async def collect():
        async for s in sentence_latents(sentences, synthesize, PlaybackClock(22050), is_cancelled=lambda: len(taken) >= 3, depth=2):
            taken.append(s.index)
            assert len(started) <= len(taken) + 2

    asyncio.run(collect())
    assert taken == [0, 1, 2, 3, 4][: len(taken)] and len(taken) <= 5
    assert len(started) <= 5


def read_pieces(pieces, log):
    """latent_sentence over `pieces` (LatentPieces, or an exception to raise), run by a
    wrapper that logs when the reading starts and ends; (result or error, log)."""
    async def stream():
        for piece in pieces:
            await asyncio.sleep(0.01)
            if isinstance(piece, Exception):
                raise piece
            log.append(("piece", piece.frames.shape[1]))
            yield piece

    async def run(read):
        log.append(("run", "start"))
        try:
            await read()
        finally:
            log.append(("run", "end"))

    async def main():
        sentence = await latent_sentence(3, (0, 9), stream, run)
        log.append(("returned", sentence.latent.filled))
        try:
            frames = await sentence.latent.until(sentence.latent.frames)
        except Exception as error:
            return error
        return sentence, frames

    try:
        return asyncio.run(main()), log
    except Exception as error:
        return error, log


def test_a_sentence_is_returned_at_its_first_piece_and_fills_in():
    a, b = np.ones((4, 3), np.float32), 2 * np.ones((4, 5), np.float32)
    (sentence, frames), log = read_pieces([LatentPiece(a, 8, (("hi", 0, 8),)), LatentPiece(b)], [])
    assert log[:3] == [("run", "start"), ("piece", 3), ("returned", 3)]  # before the second piece
    assert log[-1] == ("run", "end")  # the run lasts to the last piece
    assert (sentence.index, sentence.span, sentence.words) == (3, (0, 9), (("hi", 0, 8),))
    assert np.array_equal(frames, np.concatenate([a, b], axis=1))


def test_a_sentence_failing_before_or_after_its_first_piece():
    error, _ = read_pieces([RuntimeError("acoustic down")], [])
    assert isinstance(error, RuntimeError) and str(error) == "acoustic down"  # raised to the caller
    error, log = read_pieces([LatentPiece(np.ones((4, 3), np.float32), 8), RuntimeError("lost mid-sentence")], [])
    assert ("returned", 3) in log and str(error) == "lost mid-sentence"  # reached the latent's reader
    error, _ = read_pieces([], [])
    assert isinstance(error, c.StageError) and "no frames" in str(error)


def test_tts_outputs_of_a_chunk_carry_words_only_where_it_has_them():
    pcm = np.zeros(256, np.float32)
    plain = tts_outputs(PcmChunk(2, 512, 1, (10, 20), pcm))
    assert set(plain) == {c.PCM, c.CHUNK_INDEX, c.SAMPLE_OFFSET, c.SENTENCE_INDEX, c.TEXT_SPAN}
    assert plain[c.SAMPLE_OFFSET].dtype == np.int64 and plain[c.SAMPLE_OFFSET].tolist() == [512]
    assert plain[c.TEXT_SPAN].tolist() == [10, 20] and plain[c.CHUNK_INDEX].tolist() == [2]
    worded = tts_outputs(PcmChunk(0, 0, 0, (0, 5), pcm, (("héllo", 0, 256),)))
    assert worded[c.WORDS].tolist() == ["héllo".encode()] and worded[c.WORD_SAMPLES].tolist() == [[0, 256]]
