"""The `asr` model's recognizer streams (python_backends.asr.listening): a recognizer
stream's requests heard in order however they interleave, recognizer streams apart, and
dropped on STOP, on a cancelled request or when idle. Over the scripted VAD and
transcriber of tests/asr_fakes.py: these test the serving, not the hearing."""

import asyncio
import threading
import time

import numpy as np
import pytest

from contract.models import FINAL, PARTIAL, SPEECH_STARTED, SPEECH_STOPPED, InvalidRequest
from python_backends.asr import listening as listen_module
from python_backends.asr.inputs import AsrRequest
from python_backends.asr.listening import Listening
from tests.asr_fakes import Script, ScriptedTranscriber, ScriptedVad

SCRIPT = Script([(500, 1500, "hello there friend")], 3000)


class SlowTranscriber(ScriptedTranscriber):
    """A pass takes 20 ms, long enough for the next requests to be waiting."""

    def transcribe(self, audio):
        time.sleep(0.02)
        return super().transcribe(audio)


def listening(max_streams=4, idle_s=60.0, warnings=None):
    return Listening(lambda: ScriptedVad(SCRIPT), SlowTranscriber(SCRIPT), threads=2, max_streams=max_streams,
                     idle_s=idle_s, warn=(warnings if warnings is not None else []).append)


def requests(stream_id, stop=True, ms=100, partials=True):
    """The script in requests of `ms`, the last with STOP."""
    starts = range(0, SCRIPT.length_ms, ms)
    return [AsrRequest(stream_id, SCRIPT.audio(s, s + ms), end=stop and s == starts[-1], stop=stop and s == starts[-1],
                       partials=partials, endpoint_ms=500) for s in starts]


async def sent_at_once(listen, asked):
    """Every request handed over before any is heard, as Triton may: their events in order."""
    return [e for events in await asyncio.gather(*(listen.hear(r) for r in asked)) for e in events]


@pytest.mark.parametrize("partials", [False, True])
def test_a_recognizer_streams_requests_are_heard_in_the_order_they_came(partials):
    async def both():
        listen = listening()
        one_by_one = [e for r in requests("a", partials=partials) for e in await listen.hear(r)]
        at_once = await sent_at_once(listen, requests("b", partials=partials))
        return one_by_one, at_once

    one_by_one, at_once = asyncio.run(both())
    assert [e.kind for e in one_by_one][0] == SPEECH_STARTED and [e.kind for e in one_by_one][-2:] == [SPEECH_STOPPED, FINAL]
    if partials:  # all but the last were waiting while each was heard: it ran no partial pass
        assert PARTIAL in [e.kind for e in one_by_one] and PARTIAL not in [e.kind for e in at_once]
        assert [(e.kind, e.text) for e in at_once] == [(e.kind, e.text) for e in one_by_one if e.kind != PARTIAL]
    else:
        assert at_once == one_by_one


def test_recognizer_streams_interleaved_keep_their_own_state():
    async def interleaved():
        listen = listening()
        a, b = requests("a"), [*requests("b", stop=False)[:5], *requests("b")]  # b is half a second behind
        tasks = [listen.hear(r) for pair in zip(a, b) for r in pair] + [listen.hear(r) for r in b[len(a):]]
        results = await asyncio.gather(*tasks)
        return listen, results

    listen, results = asyncio.run(interleaved())
    finals = [e for events in results for e in events if e.kind == FINAL]
    assert [(f.utterance, f.text) for f in finals] == [(0, "hello there friend")] * 2
    assert listen.recognizer_streams == {}


def test_stop_drops_the_recognizer_stream_and_the_counts_follow():
    async def go():
        listen = listening()
        exported = []
        listen.on_stats = lambda stats: exported.append(stats.streams)
        events = [e for r in requests("a") for e in await listen.hear(r)]
        return listen, exported, events

    listen, exported, events = asyncio.run(go())
    assert max(exported) == 1 and exported[-1] == 0 and listen.recognizer_streams == {}
    assert listen.stats.audio_seconds == pytest.approx(3.0, abs=1e-9) and listen.stats.passes >= 3
    assert listen.stats.pass_seconds >= 0.02 * listen.stats.passes


def test_a_cancelled_request_drops_its_recognizer_stream_and_hears_nothing():
    async def go():
        warnings = []
        listen = listening(warnings=warnings)
        asked = requests("a", stop=False)
        for r in asked[:10]:
            await listen.hear(r)
        events = await listen.hear(asked[10], cancelled=lambda: True)
        return listen, events, warnings

    listen, events, warnings = asyncio.run(go())
    assert events == [] and listen.recognizer_streams == {} and listen.stats.streams == 0
    assert warnings == ["recognizer stream 'a' dropped: its request was cancelled"]


def test_idle_recognizer_streams_are_dropped_but_not_one_being_heard():
    async def go():
        warnings = []
        listen = listening(idle_s=10, warnings=warnings)
        await listen.hear(requests("quiet", stop=False)[0])
        gate = threading.Event()
        listen.transcriber.transcribe = lambda audio: gate.wait() and ""  # hold the busy recognizer stream's pass
        busy = asyncio.ensure_future(sent_at_once(listen, requests("busy", stop=False)[:12]))
        await asyncio.sleep(0.1)
        listen.drop_idle(time.monotonic() + 11)
        dropped = set(listen.recognizer_streams)
        gate.set()
        await busy
        return dropped, warnings

    dropped, warnings = asyncio.run(go())
    assert dropped == {"busy"} and warnings == ["recognizer stream 'quiet' dropped: no request for 10 s"]


def test_recognizer_streams_beyond_the_limit_are_refused_and_the_others_go_on():
    async def go():
        listen = listening(max_streams=1)
        await listen.hear(requests("a", stop=False)[0])
        with pytest.raises(InvalidRequest, match="the limit is 1"):
            await listen.hear(requests("b")[0])
        return await listen.hear(AsrRequest("a", np.zeros(0, np.float32), True, True, True, 500))

    assert asyncio.run(go()) == []


def test_the_sweeper_drops_idle_recognizer_streams_and_stops_with_the_rest(monkeypatch):
    async def go(listen):
        listen.start()
        await listen.hear(requests("gone", stop=False)[0])
        await asyncio.sleep(0.3)
        return set(listen.recognizer_streams)

    warnings = []
    listen = listening(idle_s=0.05, warnings=warnings)
    monkeypatch.setattr(listen_module, "SWEEP_EVERY_S", 0.1)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        assert asyncio.run_coroutine_threadsafe(go(listen), loop).result(5) == set()
        listen.shutdown()  # from another thread, as Triton's finalize calls it
        assert listen.sweeper.done() and warnings == ["recognizer stream 'gone' dropped: no request for 0.05 s"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
