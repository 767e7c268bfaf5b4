"""Listen mode end to end: speech spoken by the embedded voice, streamed up a real
WebSocket as a microphone sends it (in real time, silence included), recognized by
Triton's `asr` model, its transcripts back over protocol v1 (dictation: no chat model)."""

import asyncio
import json
import time

import numpy as np
import opuslib
import pytest

from contract import models as c
from speechstream import protocol as v1
from speechstream.client import connection
from tests.recorder import Recorder
from tests.speech import MESSAGE_MS, say, silence, spoken, word_error_rate

QUESTION = "What is your favorite kind of music to listen to on a rainy day?"


@pytest.fixture(scope="module")
def listen_url(triton, module_gateways):
    return module_gateways.start(triton.grpc_url, "--probe-interval", "0", "--admission-load", "0", "--listen",
                                 name="listen-gateway").url


@pytest.fixture(scope="module")
def question():
    return spoken(QUESTION)


async def listening(url: str, **listen) -> Recorder:
    ws = await connection(url)
    client = Recorder(ws)
    await client.until("ready")
    await client.send(type="config", listen=listen)
    await client.until("ready")
    return client


async def heard(client: Recorder, timeout: float = 30) -> list[dict]:
    """Every message until the turn's final transcript."""
    async with asyncio.timeout(timeout):
        while not [m for m in client.messages("transcript") if m["final"]]:
            await client.read()
    return client.messages()


def test_speech_streamed_in_real_time_gets_partials_while_spoken_then_one_final_with_its_words(listen_url, question):
    async def main():
        client = await listening(listen_url)
        spoken_at = time.perf_counter()
        reader = asyncio.create_task(heard(client))
        speech_end = await say(client.ws, np.concatenate([silence(1000), question]))
        await say(client.ws, silence(1500))
        await reader
        await client.ws.close()
        return client, spoken_at, speech_end

    client, spoken_at, speech_end = asyncio.run(main())
    kinds = [m["type"] for m in client.messages() if m["type"] in ("speech_started", "transcript", "speech_stopped")]
    assert kinds[0] == "speech_started" and kinds[-2:] == ["speech_stopped", "transcript"], kinds
    started = client.messages("speech_started")[0]
    assert 900 <= started["audio_ms"] <= 1300  # the question starts after 1 s of silence
    partials = [e for e in client.events if e.kind == "transcript" and not e.message["final"]]
    assert [e for e in partials if e.at < speech_end], "no partial while the question was spoken"
    (final,) = [m for m in client.messages("transcript") if m["final"]]
    assert word_error_rate(QUESTION, final["text"]) <= 0.1, final["text"]
    stopped = client.messages("speech_stopped")[0]
    assert stopped["audio_ms"] == pytest.approx(1000 + question.size * 1000 / c.ASR_SAMPLE_RATE, abs=300)
    assert {m["turn_id"] for m in client.messages() if "turn_id" in m} == {started["turn_id"]}


def test_silence_alone_makes_no_turn(listen_url):
    async def main():
        client = await listening(listen_url)
        await say(client.ws, silence(3000))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.0):
                await client.read()
        await client.ws.close()

    asyncio.run(main())


def test_end_of_speech_ends_the_turn_at_once_without_waiting_for_the_endpoint(listen_url, question):
    async def main():
        client = await listening(listen_url, endpoint_ms=5000)
        await say(client.ws, np.concatenate([silence(500), question, silence(300)]))
        sent = await client.send(type="end_of_speech")
        messages = await heard(client, timeout=10)
        final_at = next(e.at for e in client.events if e.kind == "transcript" and e.message["final"])
        await client.ws.close()
        return messages, final_at - sent

    messages, wait_s = asyncio.run(main())
    assert wait_s < 2.0  # the endpoint would have taken 5 s of silence
    assert [m["type"] for m in messages if m["type"] != "transcript"][-1] == "speech_stopped"
    assert word_error_rate(QUESTION, messages[-1]["text"]) <= 0.1


def test_smart_turn_detection_ends_a_finished_question_long_before_its_endpoint(listen_url):
    finished = spoken("How would you define true artificial intelligence?")  # Smart Turn: 0.99 over it

    async def main():
        client = await listening(listen_url, endpoint_ms=3000, turn_detection="smart")
        speech_end = await say(client.ws, np.concatenate([silence(500), finished]))
        reader = asyncio.create_task(heard(client, timeout=10))
        await say(client.ws, silence(3500))
        messages = await reader
        final_at = next(e.at for e in client.events if e.kind == "transcript" and e.message["final"])
        await client.ws.close()
        return messages, final_at - speech_end

    messages, wait_s = asyncio.run(main())
    assert wait_s < 2.0  # the endpoint's silence alone would have taken 3 s
    assert word_error_rate("How would you define true artificial intelligence?", messages[-1]["text"]) <= 0.1


def test_a_question_paused_at_its_comma_is_one_turn_with_smart_turn_detection(listen_url):
    """The pause is shorter than the endpoint: only an early decision could cut the question in two."""
    question = "If you could live anywhere in the world, where would you live?"
    first, second = question.split(", ")

    async def main():
        client = await listening(listen_url, endpoint_ms=1500, turn_detection="smart")
        reader = asyncio.create_task(heard(client, timeout=20))
        await say(client.ws, np.concatenate([silence(500), spoken(first + ","), silence(400), spoken(second),
                                             silence(2000)]))
        await reader
        await client.ws.close()
        return client

    client = asyncio.run(main())
    finals = [m for m in client.messages("transcript") if m["final"]]
    assert len(finals) == 1 and len(client.messages("speech_started")) == 1
    assert word_error_rate(question, finals[0]["text"]) <= 0.25, finals[0]["text"]


def test_opus_packets_are_heard_as_well(listen_url, question):
    encoder = opuslib.Encoder(48000, 1, opuslib.APPLICATION_VOIP)
    audio = np.concatenate([silence(500, 48000), spoken(QUESTION, 48000), silence(1000, 48000)])
    step = 48000 * MESSAGE_MS // 1000
    audio = np.pad(audio, (0, -audio.size % step))
    packets = [encoder.encode(audio[i:i + step].tobytes(), step) for i in range(0, audio.size, step)]

    async def main():
        client = await listening(listen_url, format="opus")
        reader = asyncio.create_task(heard(client))
        start = time.perf_counter()
        for i, packet in enumerate(packets):
            await asyncio.sleep(max(0.0, start + i * MESSAGE_MS / 1000 - time.perf_counter()))
            await client.ws.send(packet)
        messages = await reader
        await client.ws.close()
        return messages

    final = asyncio.run(main())[-1]
    assert final["final"] and word_error_rate(QUESTION, final["text"]) <= 0.1, final


def test_bad_audio_gets_an_error_and_loses_nothing_else(listen_url, question):
    async def main():
        client = await listening(listen_url)
        await client.ws.send(b"\x01\x02\x03")  # not whole samples
        odd = await client.until("error")
        await client.ws.send(bytes(2 * 16000))  # 1 s in one message: over 200 ms
        long = await client.until("error")
        await client.ws.send(json.dumps({"type": "speak", "context_id": "c1", "text": "Still here."}))
        await client.until("done", "c1")  # the connection speaks on
        reader = asyncio.create_task(heard(client))
        await say(client.ws, np.concatenate([silence(500), question, silence(1000)]))
        messages = await reader
        await client.ws.close()
        return odd, long, messages

    odd, long, messages = asyncio.run(main())
    assert odd["code"] == long["code"] == v1.AUDIO_NOT_ACCEPTED
    assert "2-byte samples" in odd["message"] and "over" in long["message"]
    assert word_error_rate(QUESTION, messages[-1]["text"]) <= 0.1


def test_binary_before_listen_and_listen_without_a_recognizer_are_refused(triton, gateways):
    url = gateways.start(triton.grpc_url, "--probe-interval", "0", "--admission-load", "0").url

    async def main():
        async with connection(url) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await ws.send(bytes(640))
            binary = await client.until("error")
            await client.send(type="config", listen={})
            return binary, await client.until("error")

    binary, listen = asyncio.run(main())
    assert binary["code"] == v1.BINARY_NOT_ACCEPTED and listen["code"] == v1.LISTEN_UNAVAILABLE
