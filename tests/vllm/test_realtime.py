"""OpenAI's Realtime API end to end: the clients as released, pointed at the gateway by
its base URL, hold a spoken conversation over the real server (the tier's chat_triton:
recognizer, embedded SmolLM2 on llama.cpp, the Piper chain): OpenAI's own SDK (`openai`),
and Pipecat's OpenAIRealtimeLLMService in a pipeline (in the frameworks' environment,
through tests/pipecat_realtime_driver.py)."""

import asyncio
import base64
import json
import signal
import subprocess
import time
import urllib.request
import wave

import numpy as np
import pytest
import websockets
from openai import AsyncOpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_agent_frameworks import PYTHON, ROOT
from tests.pages import http_of
from tests.speech import silence, spoken, word_error_rate

RATE = 24000  # audio/pcm
QUESTION = "What is the capital of France?"
CHUNK_MS = 100


@pytest.fixture(scope="module")
def question_audio():
    """A microphone's audio: 1 s of silence, the question, then 1.5 s of silence."""
    return np.concatenate([silence(1000, RATE), spoken(QUESTION, RATE), silence(1500, RATE)])


def client(gateway: str) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="unused", base_url=http_of(gateway) + "/v1")


async def speak(connection, audio: np.ndarray) -> None:
    """`audio` appended in 100 ms pieces, in real time, as a microphone sends it."""
    step = RATE * CHUNK_MS // 1000
    for start in range(0, len(audio), step):
        await connection.send({"type": "input_audio_buffer.append",
                               "audio": base64.b64encode(audio[start:start + step].tobytes()).decode()})
        await asyncio.sleep(CHUNK_MS / 1000)


async def until_response_done(connection, timeout_s: float = 60) -> list[dict]:
    """The server's events, as JSON, up to and with `response.done`."""
    seen = []
    try:
        async with asyncio.timeout(timeout_s):
            while not seen or seen[-1]["type"] != "response.done":
                seen.append(json.loads(await connection.recv_bytes()))
    except TimeoutError:
        raise AssertionError(f"no response.done in {timeout_s:g} s; seen: {[e['type'] for e in seen]}") from None
    return seen


def realtime_sessions(gateway: str) -> float:
    """The gateway's speechstream_realtime_sessions gauge."""
    with urllib.request.urlopen(http_of(gateway) + "/metrics", timeout=5) as r:
        return next(s.value for f in text_string_to_metric_families(r.read().decode())
                    if f.name == "speechstream_realtime_sessions" for s in f.samples)


def test_the_sdk_holds_a_spoken_turn_in_the_ga_api(chat_gateway, question_audio):
    async def run():
        async with client(chat_gateway).realtime.connect(model="speechstream") as connection:
            created = await connection.recv()
            assert created.type == "session.created" and created.session.type == "realtime"
            assert await asyncio.to_thread(realtime_sessions, chat_gateway) == 1
            await connection.session.update(session={"type": "realtime", "audio": {"input": {
                "transcription": {"model": "whisper-1"}}, "output": {"voice": "alloy"}}})
            speaking = asyncio.create_task(speak(connection, question_audio))
            seen = await until_response_done(connection)
            await speaking
            return seen

    seen = asyncio.run(run())
    deadline = time.monotonic() + 10  # the gateway ends the session as the socket closes
    while realtime_sessions(chat_gateway) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert realtime_sessions(chat_gateway) == 0  # counted while open only
    kinds = [e["type"] for e in seen]
    (heard,) = [e for e in seen if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert word_error_rate(QUESTION, heard["transcript"]) <= 0.25, heard["transcript"]
    assert kinds.index("input_audio_buffer.speech_stopped") < kinds.index("input_audio_buffer.committed") \
        < kinds.index("response.created") < kinds.index("response.output_audio.delta")
    audio = b"".join(base64.b64decode(e["delta"]) for e in seen if e["type"] == "response.output_audio.delta")
    transcript = "".join(e["delta"] for e in seen if e["type"] == "response.output_audio_transcript.delta")
    assert len(audio) > RATE * 2 * 0.5 and transcript.strip()  # over half a second of reply, and its words
    done = seen[-1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["transcript"] == transcript


def test_a_beta_client_gets_the_beta_names_and_create_response_false_waits(chat_gateway, question_audio):
    async def run():
        async with client(chat_gateway).realtime.connect(
                model="speechstream", extra_headers={"OpenAI-Beta": "realtime=v1"}) as connection:
            created = json.loads(await connection.recv_bytes())
            assert created["session"]["input_audio_format"] == "pcm16"
            await connection.send({"type": "session.update", "session": {
                "turn_detection": {"type": "server_vad", "silence_duration_ms": 500, "create_response": False}}})
            await speak(connection, question_audio)
            before = []
            while not any(e["type"] == "conversation.item.created" for e in before):
                before.append(json.loads(await connection.recv_bytes()))
            await connection.send({"type": "response.create"})
            return before, await until_response_done(connection)

    before, seen = asyncio.run(run())
    assert "response.created" not in [e["type"] for e in before]  # nothing until the client asked
    kinds = {e["type"] for e in seen}
    assert {"response.created", "response.audio.delta", "response.audio_transcript.delta", "response.done"} <= kinds
    assert not kinds & {"response.output_audio.delta", "conversation.item.added"}


STORY = "Tell me a long story about a dragon."


@pytest.fixture(scope="module")
def story_audio():
    """A question with a long answer: 1 s of silence, the question, then 1.5 s of silence."""
    return np.concatenate([silence(1000, RATE), spoken(STORY, RATE), silence(1500, RATE)])


async def until(connection, kind: str, seen: list[dict], timeout_s: float = 60) -> dict:
    """The server's events into `seen` until one of `kind`, which it returns."""
    async with asyncio.timeout(timeout_s):
        while True:
            seen.append(json.loads(await connection.recv_bytes()))
            if seen[-1]["type"] == kind:
                return seen[-1]


def test_barge_in_stops_the_reply_and_truncate_keeps_the_words_heard(chat_gateway, story_audio, question_audio):
    """The listener speaks again while the reply plays: nothing more of it comes after
    speech_started (a reply still being written ends cancelled, turn_detected, as the unit
    tests show deterministically); the client says it played 1.5 s, and the item keeps
    the words heard whole by then."""
    async def run():
        async with client(chat_gateway).realtime.connect(model="speechstream") as connection:
            seen: list[dict] = []
            await connection.session.update(session={  # a long reply, still playing when the listener speaks
                "type": "realtime", "instructions": "You tell long, detailed stories.", "max_output_tokens": 256})
            speaking = asyncio.create_task(speak(connection, story_audio))
            first = await until(connection, "response.output_audio.delta", seen)
            await speaking
            speaking = asyncio.create_task(speak(connection, question_audio))  # barge in
            barged = len(seen)
            await until(connection, "input_audio_buffer.speech_started", seen)
            await connection.send({"type": "conversation.item.truncate", "item_id": first["item_id"],
                                   "content_index": 0, "audio_end_ms": 1500})
            await until(connection, "conversation.item.truncated", seen)
            await connection.send({"type": "conversation.item.retrieve", "item_id": first["item_id"]})
            item = (await until(connection, "conversation.item.retrieved", seen))["item"]
            await until(connection, "response.done", seen)  # the reply to the new question
            await speaking
            return seen, barged, first, item

    seen, barged, first, item = asyncio.run(run())
    started = next(i for i, e in enumerate(seen) if i >= barged and e["type"] == "input_audio_buffer.speech_started")
    mine = [e for e in seen if e.get("response_id") == first["response_id"] or
            e.get("response", {}).get("id") == first["response_id"]]
    done = next(e for e in mine if e["type"] == "response.done")
    assert not [e for e in seen[started:] if e["type"] == "response.output_audio.delta"
                and e["response_id"] == first["response_id"]]  # not a sample more of it
    if seen.index(done) > started:  # still being written when the listener spoke
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
    said = "".join(e["delta"] for e in mine if e["type"] == "response.output_audio_transcript.delta")
    kept = item["content"][0]["transcript"]
    assert kept and said.startswith(kept.split()[0]) and len(kept.split()) < len(said.split())


def test_hostile_events_get_errors_and_the_session_then_holds_a_turn(chat_gateway, question_audio):
    """Over the real gateway: bad JSON, an unknown event, bad base64, an oversized append,
    a tool and a function call item are each answered with an `error` naming the field;
    a second of audio sent at once runs ahead of real time and is refused once; then the
    same session hears and answers a spoken question."""
    hostile = [
        ("{not json", None),
        (json.dumps({"type": "session.dance"}), "type"),
        (json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}), "audio"),
        (json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(RATE * 2 * 3)).decode()}),
         "audio"),
        (json.dumps({"type": "session.update", "session": {"tools": [{"type": "function", "name": "f"}]}}),
         "session.tools"),
        (json.dumps({"type": "conversation.item.create", "item": {"type": "function_call", "name": "f"}}), "item.type"),
    ]

    async def run():
        async with client(chat_gateway).realtime.connect(model="speechstream") as connection:
            seen: list[dict] = []
            params = []
            for frame, _ in hostile:
                await connection.send_raw(frame)
                params.append((await until(connection, "error", seen))["error"]["param"])
            second = base64.b64encode(bytes(RATE * 2 // 5)).decode()  # 200 ms, five times a tick: 2 s ahead and more
            for _ in range(15):
                await connection.send({"type": "input_audio_buffer.append", "audio": second})
            flood = await until(connection, "error", seen)
            await asyncio.sleep(3.5)  # back within real time
            speaking = asyncio.create_task(speak(connection, question_audio))
            done = await until(connection, "response.done", seen)
            await speaking
            return params, flood, done, seen

    params, flood, done, seen = asyncio.run(run())
    assert params == [param for _, param in hostile]
    assert flood["error"]["code"] == "audio_not_accepted" and "ahead of real time" in flood["error"]["message"]
    assert [e["type"] for e in seen].count("error") == len(hostile) + 1  # the flood is told once
    assert done["response"]["status"] == "completed"
    (heard,) = [e for e in seen if e["type"] == "input_audio_buffer.committed"]
    assert heard["item_id"]


def drive(driver: str, url: str, audio: np.ndarray, tmp_path) -> dict:
    """What a framework's driver (tests/DRIVER, in the frameworks' environment) reports
    after feeding `audio` to its Realtime client pointed at `url`."""
    wav = tmp_path / "question.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(RATE)
        w.writeframes(audio.tobytes())
    run = subprocess.run([str(PYTHON), str(ROOT / "tests" / driver), url, str(wav)],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def assert_answered(out: dict) -> None:
    """The question heard, and a reply of over half a second of speech with its words."""
    assert out["errors"] == []
    assert word_error_rate(QUESTION, out["transcript"]) <= 0.25, out["transcript"]
    assert out["reply"].strip()
    assert out["audio_samples"] > RATE // 2 and out["audio_peak"] > 0.05


def test_pipecats_realtime_service_answers_a_spoken_turn(chat_gateway, question_audio, tmp_path):
    """Pipecat's OpenAIRealtimeLLMService in a pipeline, fed the question as 20 ms frames in
    real time: the user's transcript comes upstream, the reply's words and audio downstream."""
    out = drive("pipecat_realtime_driver.py", chat_gateway.replace("/v1/stream", "/v1/realtime"), question_audio,
                tmp_path)
    assert_answered(out)
    assert out["stopped"] and out["rates"] == [RATE]


def test_livekits_realtime_model_streams_a_reply(chat_gateway, question_audio, tmp_path):
    """LiveKit's openai.realtime.RealtimeModel through its session API (no room), given the
    HTTP base URL as its users give it: the server's turn detection starts the generation."""
    out = drive("livekit_realtime_driver.py", http_of(chat_gateway) + "/v1", question_audio, tmp_path)
    assert_answered(out)
    assert out["rates"] == [RATE]


def test_the_agents_sdks_realtime_runner_plays_a_turn(chat_gateway, question_audio, tmp_path):
    """The Agents SDK's RealtimeRunner with a RealtimeAgent, its model's URL the gateway's."""
    assert_answered(drive("agents_realtime_driver.py", chat_gateway.replace("/v1/stream", "/v1/realtime"),
                          question_audio, tmp_path))


def test_sigterm_lets_the_reply_end_then_closes_with_1001(chat_triton, module_gateways, question_audio):
    """A rolling update cuts no Realtime reply: the gateway told to stop while a reply is
    spoken lets it end (response.done, completed), then closes the session with 1001."""
    gateway = module_gateways.start(chat_triton.grpc_url, "--probe-interval", "0", "--admission-load", "0",
                                    "--chat-model", "embedded", "--listen", "--drain", "60", name="draining-gateway")

    async def run():
        async with client(gateway.url).realtime.connect(model="speechstream") as connection:
            seen: list[dict] = []
            speaking = asyncio.create_task(speak(connection, question_audio))
            await until(connection, "response.output_audio.delta", seen)
            gateway.process.send_signal(signal.SIGTERM)
            done = await until(connection, "response.done", seen)
            speaking.cancel()
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await until(connection, "never", seen, timeout_s=30)
            return done, closed.value.rcvd

    done, close = asyncio.run(run())
    assert done["response"]["status"] == "completed"
    assert (close.code, close.reason) == (1001, "server shutting down")
    assert gateway.process.wait(10) == 0
