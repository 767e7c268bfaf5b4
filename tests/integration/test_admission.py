"""Admission at capacity, over the real Triton: once `tts` has measured what it
sustains, a gateway admits streams only up to --admission-load of it; the others are
told `server_busy` at once, before any audio, and a stream admitted later speaks whole.
Two gateways sharing the Triton admit together what one would."""

import asyncio
import json
import time
import urllib.error
import urllib.request

import pytest

from operations.loopback import gateway_metric
from perf.tools.workloads import workload
from speechstream import protocol as v1
from speechstream.client import SpeechClient, SpeechError, connection
from tests.integration.test_discovery import open_context, open_until_refused, wait_for
from tests.recorder import Recorder, holding_connection

CONTEXTS = 16


@pytest.fixture
def admitting(triton, gateways):
    """A gateway admitting a tenth of the measured capacity (a few streams here)."""
    return gateways.start(triton.grpc_url, *admitting_flags(triton))


def admitting_flags(triton) -> tuple[str, ...]:
    """A tenth of the capacity, no probe (whose word would count among the streams), and
    no room past it for streams ahead of their listeners (tested on its own below)."""
    return ("--admission-load", "0.1", "--admission-slack", "0", "--probe-interval", "0",
            "--fleet-metrics-port", str(triton.metrics_port))


async def outcome(context) -> tuple[str, float | None]:
    """('done', None) or (the error code, its retry_after_ms)."""
    try:
        async for _ in context.events():
            pass
    except SpeechError as e:
        return e.code, e.retry_after_ms
    return ("done" if context.done else "ended"), None


def post_speech(port: int) -> tuple[int, dict, str | None]:
    body = json.dumps({"model": "tts-1", "voice": "alloy", "input": "Am I admitted?"}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/audio/speech", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, {}, None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers.get("Retry-After")


def test_streams_past_the_measured_capacity_are_told_busy_and_later_ones_are_admitted(triton, admitting):
    url = admitting.url
    capacity = "speechstream_triton_capacity_streams"
    assert gateway_metric(admitting.port, capacity, triton.grpc_url) == 0  # nothing spoken, nothing measured

    async def run():
        client = await SpeechClient.connect(url, format="pcm_s16le")
        try:
            async for _ in client.speak("Warm up, and let the server measure itself."):
                pass
            assert gateway_metric(admitting.port, capacity, triton.grpc_url) > 0
            contexts = [client.context() for _ in range(CONTEXTS)]
            for context in contexts:
                await context.speak(workload("paragraph"))
            outcomes = [asyncio.create_task(outcome(ctx)) for ctx in contexts]
            # A refusal comes at once: the admitted contexts are still speaking.
            await asyncio.wait(outcomes, return_when=asyncio.FIRST_COMPLETED)
            http_while_full = await asyncio.to_thread(post_speech, admitting.port)
            outcomes = await asyncio.gather(*outcomes)
            again = [frame async for frame in client.speak("Admitted again.")]
            return outcomes, http_while_full, again
        finally:
            await client.close()

    outcomes, (status, error, retry_after), again = asyncio.run(run())
    codes = [code for code, _ in outcomes]
    assert codes[0] == "done"  # the first context is admitted
    assert v1.SERVER_BUSY in codes and set(codes) <= {"done", v1.SERVER_BUSY}
    assert all(retry > 0 for code, retry in outcomes if code == v1.SERVER_BUSY)
    assert again  # capacity freed: admitted and spoken
    assert status == 429 and error["error"]["code"] == v1.SERVER_BUSY and int(retry_after) > 0


def test_at_capacity_streams_that_asked_to_queue_wait_their_turn_and_all_speak(admitting):
    url = admitting.url

    async def run():
        client = await SpeechClient.connect(url, format="pcm_s16le", queue=True)
        try:
            async for _ in client.speak("Warm up, and let the server measure itself."):
                pass
            contexts = [client.context() for _ in range(12)]  # past a tenth of the capacity on a fast host too
            for context in contexts:
                await context.speak(workload("short"))
            return await asyncio.gather(*(said(ctx) for ctx in contexts))
        finally:
            await client.close()

    async def said(context):
        """What the context heard, in order: message types with the positions told, "audio" for frames."""
        return [("audio", None) if e.kind is None else (e.kind, e.message.get("position")) async for e in context.events()]

    heard = asyncio.run(run())
    assert all(kinds[-1] == ("done", None) for kinds in heard)  # none refused: every one spoke
    queued = [kinds for kinds in heard if kinds[0][0] == "queued"]
    assert queued  # past a tenth of the capacity, some waited
    for kinds in queued:
        positions = [position for kind, position in kinds if kind == "queued"]
        assert positions == sorted(set(positions), reverse=True)  # only ever moved up
        assert [kind for kind, _ in kinds].index("audio") == len(positions)  # audio only once admitted


@pytest.fixture
def second(triton, gateways):
    """Another gateway over the same Triton, admitting as `admitting` does."""
    return gateways.start(triton.grpc_url, *admitting_flags(triton), name="second")


async def warmed(port: int) -> Recorder:
    """A connection whose gateway has heard the Triton's capacity (a stream's last
    response), set to send the most bytes, so that a context it stops reading holds its
    request on Triton."""
    client = Recorder(await holding_connection(f"ws://127.0.0.1:{port}{v1.PROTOCOL_PATH}"))
    await client.until("ready")
    await client.send(type="config", format="pcm_s16le", sample_rate=48000)
    await client.until("ready")
    await client.send(type="speak", context_id="warm", text="Warm up.")
    await client.until("done", "warm")
    return client


def test_two_gateways_over_one_triton_admit_together_what_it_sustains(triton, admitting, second):
    """Each gateway once compared its own streams with the whole capacity: two admitted twice too much."""
    elsewhere = "speechstream_triton_streams_elsewhere"

    async def run():
        first, other = await warmed(admitting.port), await warmed(second.port)
        try:
            await asyncio.to_thread(wait_for, lambda: gateway_metric(admitting.port, elsewhere, triton.grpc_url) == 0,
                                    "the first gateway sees the second's warm-up ended")
            outcomes = await open_until_refused(first, "a")
            admitted = outcomes.count("admitted")
            # The other gateway has read, from Triton's metrics, the streams held through the first.
            await asyncio.to_thread(wait_for, lambda: gateway_metric(second.port, elsewhere, triton.grpc_url) >= admitted,
                                    "the second gateway sees the first's streams")
            while_full = await open_context(other, "b0")
            await first.ws.close()  # its streams end: the fleet has room again
            await asyncio.to_thread(wait_for, lambda: gateway_metric(second.port, elsewhere, triton.grpc_url) == 0,
                                    "the first gateway's streams gone")
            once_free = await open_context(other, "b1")
            return outcomes, while_full, once_free
        finally:
            await first.ws.close()
            await other.ws.close()

    outcomes, while_full, once_free = asyncio.run(run())
    assert outcomes[0] == "admitted" and v1.SERVER_BUSY in outcomes  # the first gateway filled a tenth of it
    assert while_full == v1.SERVER_BUSY  # the second admits nothing more while those run
    assert once_free == "admitted"


def test_past_the_admitted_load_a_stream_is_taken_once_those_speaking_are_ahead_of_their_listeners(triton, gateways):
    """--admission-slack: a gateway that admits about no stream by its load (--admission-load
    0.01) takes another once the one speaking is a second of audio ahead of its listener,
    not while it waits for its first audio."""
    flags = ("--admission-load", "0.01", "--admission-slack", "1", "--admission-peak", "100", "--probe-interval", "0",
             "--fleet-metrics-port", str(triton.metrics_port))
    url = gateways.start(triton.grpc_url, *flags).url

    async def run():
        async with connection(url) as ws:
            client = Recorder(ws)
            await client.until("ready")
            await client.send(type="speak", context_id="warm", text="Warm up, and let the server measure itself.")
            await client.until("done", "warm")
            await client.send(type="speak", context_id="first", text=workload("long"))
            await client.send(type="speak", context_id="too_soon", text="Am I admitted?")
            too_soon = await client.until("error", "too_soon")
            while not client.audio("first") or ahead_s(client.frames("first")) < 2:
                await client.read()
            await client.send(type="speak", context_id="ahead", text="Am I admitted?")
            ahead = await client.until("done", "ahead")
            await client.send(type="cancel", context_id="first")
            return too_soon, ahead

    too_soon, ahead = asyncio.run(run())
    assert too_soon["code"] == v1.SERVER_BUSY
    assert ahead["audio_ms"] > 500


def ahead_s(frames) -> float:
    """How far the frames received are ahead of a listener playing them from the first."""
    return len(frames) * 0.02 - (time.perf_counter() - frames[0].at)
