"""The three models inside a real tritonserver, over real gRPC on loopback."""

import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from contract import models as c
from contract.text import split_sentences
from operations.triton_client import (
    InferenceServerException,
    Stream,
    StreamError,
    infer,
    inference_count,
    stream,
)
from perf.tools.workloads import harvard_sentences, workload
from tests.audio import snr_db


def test_models_declare_the_contract(triton):
    with grpcclient.InferenceServerClient(triton.grpc_url) as client:
        for model in (c.ACOUSTIC_MODEL, c.VOCODER_MODEL, c.TTS_MODEL):
            config = client.get_model_config(model).config
            assert [i.name for i in config.input] == [t["name"] for t in c.model_inputs(model)]
            assert [o.name for o in config.output] == [t["name"] for t in c.model_outputs(model)]
            assert config.model_transaction_policy.decoupled == (model != c.VOCODER_MODEL)
        assert client.get_model_config(c.VOCODER_MODEL).config.max_batch_size > 1


def strings(*values):
    return np.array([v.encode() for v in values], dtype=object)


@pytest.mark.parametrize("name", ["short", "paragraph", "long"])
def test_streamed_audio_matches_whole_utterance_vocoding(triton, name):
    text, seed = workload(name), 1234
    latents = []
    for sentence in split_sentences(text):
        (response,) = stream(triton.grpc_url, c.ACOUSTIC_MODEL, {c.TEXT: sentence.text, c.SEED: np.int64(seed)})
        latents.append(response.get(c.LATENT))
    whole = np.concatenate([
        infer(triton.grpc_url, c.VOCODER_MODEL, {c.LATENT: latent[None]}).as_numpy(c.PCM)[0] for latent in latents
    ])
    chunks = stream(triton.grpc_url, c.TTS_MODEL, {c.TEXT: text, c.SEED: np.int64(seed)})
    pcm = [r.get(c.PCM) for r in chunks]
    streamed = np.concatenate(pcm)
    assert streamed.size == whole.size
    assert snr_db(whole, streamed) >= 60
    indices = [int(r.get(c.SENTENCE_INDEX)[0]) for r in chunks]
    assert indices == sorted(indices) and set(indices) == set(range(len(split_sentences(text))))


def test_acoustic_sends_a_sentences_head_ahead_of_its_rest(triton):
    text, seed = split_sentences(workload("paragraph"))[0].text, np.int64(5)
    (whole,) = stream(triton.grpc_url, c.ACOUSTIC_MODEL, {c.TEXT: text, c.SEED: seed})
    head, rest = stream(triton.grpc_url, c.ACOUSTIC_MODEL, {c.TEXT: text, c.SEED: seed, c.HEAD_FRAMES: np.int32(32)})
    # The head carries the sentence's timing, the rest only frames.
    assert head.get(c.LATENT).shape[1] == 32 and head.get(c.DURATIONS).sum() == whole.get(c.LATENT).shape[1]
    assert list(head.get(c.WORDS)) == list(whole.get(c.WORDS)) and rest.get(c.WORDS).size == 0
    assert rest.get(c.DURATIONS).size == 0
    joined = np.concatenate([head.get(c.LATENT), rest.get(c.LATENT)], axis=1)
    assert snr_db(whole.get(c.LATENT), joined) > 80
    assert head.seconds < 0.7 * rest.seconds  # the head did not wait for the rest's flow


def test_acoustic_makes_a_head_given_two_threads_as_on_one_and_refuses_none(triton):
    text, seed = split_sentences(workload("paragraph"))[0].text, np.int64(5)
    asked = {c.TEXT: text, c.SEED: seed, c.HEAD_FRAMES: np.int32(32)}
    one, two = (stream(triton.grpc_url, c.ACOUSTIC_MODEL, asked | {c.HEAD_THREADS: np.int32(n)}) for n in (1, 2))
    assert [r.get(c.LATENT).shape for r in one] == [r.get(c.LATENT).shape for r in two]
    assert all(snr_db(a.get(c.LATENT), b.get(c.LATENT)) > 100 for a, b in zip(one, two))
    with pytest.raises((StreamError, InferenceServerException), match="HEAD_THREADS=0 is out of range"):
        stream(triton.grpc_url, c.ACOUSTIC_MODEL, asked | {c.HEAD_THREADS: np.int32(0)})


def test_acoustic_speaks_its_text_as_one_sentence(triton):
    (whole,) = stream(triton.grpc_url, c.ACOUSTIC_MODEL, {c.TEXT: "Dr. Smith arrived. He sat."})
    assert [w.decode() for w in whole.get(c.WORDS)] == ["Dr.", "Smith", "arrived.", "He", "sat."]
    assert whole.get(c.DURATIONS).sum() == whole.get(c.LATENT).shape[1]


def test_tts_speaks_each_of_sentences_as_one_sentence(triton):
    text = "Dr. Smith arrived. He sat."
    assert len(split_sentences(text)) == 2  # as TEXT it is two sentences
    as_text = stream(triton.grpc_url, c.TTS_MODEL, {c.TEXT: text})
    assert sorted({int(r.get(c.SENTENCE_INDEX)[0]) for r in as_text}) == [0, 1]
    one = stream(triton.grpc_url, c.TTS_MODEL, {c.SENTENCES: strings(text)})
    assert {int(r.get(c.SENTENCE_INDEX)[0]) for r in one} == {0}
    elements = [text, "Then he left.", "Bye."]
    chunks = stream(triton.grpc_url, c.TTS_MODEL, {c.SENTENCES: strings(*elements)})
    indices = [int(r.get(c.SENTENCE_INDEX)[0]) for r in chunks]
    assert indices == sorted(indices) and set(indices) == {0, 1, 2}
    words = [w.decode() for r in chunks if r.get(c.WORDS) is not None for w in r.get(c.WORDS)]
    assert words == " ".join(elements).split()


def test_first_audio_arrives_before_the_second_sentence_is_synthesized(triton):
    # A short first sentence, then one long sentence that keeps the acoustic stage busy.
    text = "Hello there. " + ", and ".join(s.rstrip(".") for s in harvard_sentences()[:6]) + "."
    first, second = split_sentences(text)
    stream(triton.grpc_url, c.TTS_MODEL, {c.TEXT: text})  # warm up
    # Both sentences synthesized one after the other, as a stream's acoustic work starts.
    second_sentence_ready = sum(
        stream(triton.grpc_url, c.ACOUSTIC_MODEL, {c.TEXT: s.text})[-1].seconds for s in (first, second)
    )
    tts = stream(triton.grpc_url, c.TTS_MODEL, {c.TEXT: text})
    assert int(tts[0].get(c.SENTENCE_INDEX)[0]) == 0
    assert tts[0].seconds < second_sentence_ready, (tts[0].seconds, second_sentence_ready)


def test_concurrent_streams_each_start_before_any_finishes(triton):
    results = {}

    def run(i):
        results[i] = stream(triton.grpc_url, c.TTS_MODEL, {c.TEXT: workload("paragraph")})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    firsts = [r[0].seconds for r in results.values()]
    lasts = [r[-1].seconds for r in results.values()]
    assert max(firsts) < min(lasts) / 2, (firsts, lasts)


def test_cancelling_a_stream_stops_vocoder_and_acoustic_work(triton):
    text = workload("long")
    sentences = len(split_sentences(text))
    models = (c.VOCODER_MODEL, c.ACOUSTIC_MODEL)
    before = {m: inference_count(triton.grpc_url, m) for m in models}
    s = Stream(triton.grpc_url)
    s.send(c.TTS_MODEL, {c.TEXT: text})
    for _ in range(3):
        s.next()
    s.cancel()
    at_cancel = {m: inference_count(triton.grpc_url, m) for m in models}
    time.sleep(2.0)
    after = {m: inference_count(triton.grpc_url, m) for m in models}
    s.client.close()
    for m in models:
        assert after[m] - at_cancel[m] <= 3, m  # what was in flight when the cancel arrived
        assert after[m] - before[m] < sentences // 4, m  # the whole text needs ≥ 1 per sentence
    # And the server goes on serving.
    assert stream(triton.grpc_url, c.TTS_MODEL, {c.TEXT: "Still here."})


@pytest.mark.parametrize("model", [c.TTS_MODEL, c.ACOUSTIC_MODEL])
@pytest.mark.parametrize("values,message", [
    ({c.TEXT: ""}, "TEXT is empty"),
    ({c.TEXT: "   \n"}, "TEXT is empty"),
    ({c.TEXT: "Hi.", c.LENGTH_SCALE: np.float32(100)}, "LENGTH_SCALE=100.0 is out of range"),
    ({c.TEXT: "Hi.", c.NOISE_SCALE: np.float32(-1)}, "NOISE_SCALE=-1.0 is out of range"),
    ({c.TEXT: "Hi.", c.SEED: np.int64(-5)}, "SEED=-5 is out of range"),
    ({c.TEXT: "Hi.", c.LENGTH_SCALE: np.int32(1)}, "LENGTH_SCALE"),
])
def test_bad_requests_get_a_clear_error_and_the_server_keeps_serving(triton, model, values, message):
    with pytest.raises((StreamError, InferenceServerException), match=message):
        stream(triton.grpc_url, model, values)
    assert stream(triton.grpc_url, model, {c.TEXT: "Still serving."})


@pytest.mark.parametrize("model,values,message", [
    (c.TTS_MODEL, {c.TEXT: "a" * (c.MAX_TEXT_CHARS + 1)}, f"limit is {c.MAX_TEXT_CHARS}"),
    (c.ACOUSTIC_MODEL, {c.TEXT: "a" * (c.MAX_SENTENCE_CHARS + 1)}, f"limit is {c.MAX_SENTENCE_CHARS}"),
    (c.TTS_MODEL, {c.LENGTH_SCALE: np.float32(1)}, "exactly one of TEXT .* or SENTENCES"),
    (c.TTS_MODEL, {c.TEXT: "Hi.", c.SENTENCES: strings("Hi.")}, "exactly one of TEXT .* or SENTENCES"),
    (c.TTS_MODEL, {c.SENTENCES: strings("Fine.", " ")}, r"SENTENCES\[1\] is blank"),
    (c.TTS_MODEL, {c.SENTENCES: strings("a" * (c.MAX_SENTENCE_CHARS + 1))}, r"SENTENCES\[0\] has .* the limit is"),
    (c.ACOUSTIC_MODEL, {c.LENGTH_SCALE: np.float32(1)}, "TEXT is required"),
])
def test_text_and_sentences_are_refused_over_their_limits_or_missing(triton, model, values, message):
    with pytest.raises((StreamError, InferenceServerException), match=message):
        stream(triton.grpc_url, model, values)


@pytest.mark.parametrize("values,message", [
    ({c.TEXT: "Hi.", c.INITIAL_CHUNK_FRAMES: np.int32(0)}, "INITIAL_CHUNK_FRAMES=0 is out of range"),
    ({c.TEXT: "Hi.", c.CHUNK_FRAMES: np.int32(100000)}, "CHUNK_FRAMES=100000 is out of range"),
    ({c.TEXT: "Hi.", c.LEFT_CONTEXT_FRAMES: np.int32(-1)}, "LEFT_CONTEXT_FRAMES=-1 is out of range"),
])
def test_bad_chunking_parameters_are_refused(triton, values, message):
    with pytest.raises(StreamError, match=message):
        stream(triton.grpc_url, c.TTS_MODEL, values)


def test_chunking_parameters_shape_the_stream(triton):
    text = workload("short")
    chunks = stream(triton.grpc_url, c.TTS_MODEL, {c.TEXT: text, c.INITIAL_CHUNK_FRAMES: np.int32(4), c.CHUNK_FRAMES: np.int32(16)})
    sizes = [r.get(c.PCM).size // 256 for r in chunks]
    assert sizes[:3] == [4, 8, 16] and max(sizes) <= 16 + 8


@pytest.mark.parametrize("text", ["...", "—", "😀", "12345678901234567890"])
def test_text_without_ordinary_words_is_still_spoken(triton, text):
    chunks = stream(triton.grpc_url, c.TTS_MODEL, {c.TEXT: text})
    assert chunks and sum(r.get(c.PCM).size for r in chunks) > 0
