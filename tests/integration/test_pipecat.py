"""`speechstream.pipecat.SpeechstreamTTSService` in real Pipecat pipelines against the real
server: LLM turns streamed in as deltas come out as the text's synthesis at the pipeline's
rate with its words timed as the server timed them; an interruption cancels its context
on the server and the next turn speaks on the same socket; TTFB metrics; a gateway going
away mid-turn is resumed on another. And the driver's time to first audio for perf.

Pipecat lives in the frameworks' environment (.venv-agents; tests/agents-requirements.txt
says why): tests/pipecat_driver.py runs there and reports what came out as JSON."""

import json
import subprocess

import numpy as np
import pytest

from perf.tools.workloads import harvard_sentences
from speechstream.client import SyncSpeechClient
from tests.integration.test_agent_frameworks import PYTHON, ROOT
from tests.integration.test_speech_http import SEED, TEXT
from tests.voices import GERMAN

DRIVER = ROOT / "tests" / "pipecat_driver.py"
RATE = 16000  # neither the server's default (48 kHz) nor Pipecat's (24 kHz): the pipeline's
LONG = " ".join(harvard_sentences()[:5])  # interrupted at its first audio
FRAME_MS = 20  # a context's last frame is padded to it
# How far the first word's time as the sink reckons it (from the first audio frame it
# received) may be from the server's: the service starts timing words as it pushes that
# frame, a moment before the sink gets it. The words after it are timed from the first
# exactly as the server timed them (to its milliseconds).
WORD_S = 0.1


def drive(*args: str, timeout: float = 180) -> dict:
    run = subprocess.run([str(PYTHON), str(DRIVER), *args], capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def reference(url: str, text: str, rate: int, **voice: str) -> dict:
    """The text as protocol v1 speaks it with the same seed: its audio_ms and its words'
    start times."""
    config = {"format": "pcm_s16le", "sample_rate": rate, "seed": SEED, "timestamps": True, **voice}
    with SyncSpeechClient.connect(url, **config) as client:
        told = [e.message for e in client.events(text) if e.kind == "timestamps"]
        return {"audio_ms": client.done["audio_ms"], "words": [w for m in told for w in m["words"]],
                "start_s": [ms / 1000 for m in told for ms in m["start_ms"]]}


@pytest.fixture(scope="module")
def turns(gateway) -> dict:
    """Three LLM turns on one service: TEXT, LONG interrupted at its first audio, TEXT."""
    return drive("turns", gateway, str(RATE), str(SEED), TEXT, LONG)


@pytest.fixture(scope="module")
def said(gateway) -> dict:
    return reference(gateway, TEXT, RATE)


def check_turn(turn: dict, said: dict) -> None:
    """The turn's audio is all the server sent for it, at the pipeline's rate, and the
    text's synthesis; its words are the text's, timed as the server timed them."""
    assert turn["rates"] == [RATE] and turn["channels"] == [1]
    assert turn["rms"] > 0.02 and turn["peak"] > 0.2  # speech, not silence
    assert turn["samples"] == round(turn["served_s"] * RATE)
    assert 0 <= turn["samples"] * 1000 / RATE - said["audio_ms"] <= FRAME_MS
    words, times = [w for w, _ in turn["words"]], [t for _, t in turn["words"]]
    assert words == said["words"] == TEXT.split()
    assert np.all(np.diff(times) > 0) and times[-1] < turn["samples"] / RATE
    check_times(times, said["start_s"])


def check_times(times: list[float], start_s: list[float]) -> None:
    assert abs(times[0] - start_s[0]) <= WORD_S
    assert np.allclose(np.subtract(times, times[0]), np.subtract(start_s, start_s[0]), atol=0.001)


def test_an_llm_turn_streamed_in_deltas_comes_out_as_the_texts_synthesis_with_its_words_timed(turns, said):
    check_turn(turns["turns"][0], said)
    assert turns["errors"] == []


def test_an_interruption_cancels_the_context_on_the_server(turns, gateway):
    interrupted = turns["turns"][1]
    assert interrupted["frames"] > 0  # it was speaking
    # The turn had no end (an interrupted LLM's): only the cancel closes its context.
    assert turns["interrupted"]["open_contexts_after"] == 0
    # The server stopped there: it sent a fraction of the text's synthesis, and none of
    # what it sent came out of the pipeline after the interruption.
    assert interrupted["served_s"] * 1000 < reference(gateway, LONG, RATE)["audio_ms"] / 2
    assert turns["interrupted"]["audio_frames_after"] == 0


def test_the_next_turn_speaks_on_the_same_socket(turns, said):
    check_turn(turns["turns"][2], said)
    assert len({t["context_id"] for t in turns["turns"]}) == 3  # a context per turn
    # One connection all along: opened once, closed at the end, the same session.
    assert (turns["connected"], turns["disconnected"], turns["resumes"]) == (1, 1, 0)
    assert turns["same_session"] and turns["connections_during_last_turn"] == 1


def test_each_turn_reports_its_time_to_first_byte(turns):
    # One per turn that spoke (the interrupted one spoke before it was cut short).
    assert len(turns["ttfb"]) == 3 and all(0 < s < 5 for s in turns["ttfb"])


def test_a_rate_the_server_does_not_serve_is_asked_above_and_resampled_turn_by_turn(gateway, said):
    # Two TTSSpeakFrames (a bot's greeting: a turn each) at 22.05 kHz: the server sends
    # 24 kHz, the service resamples each turn apart, its tail flushed at its end (not
    # held into the next turn).
    got = drive("speak", gateway, "22050", "0", TEXT)
    assert got["errors"] == [] and got["connected"] == 1
    for turn in got["turns"]:
        assert turn["rates"] == [22050] and turn["rms"] > 0.02
        assert 0 <= turn["samples"] * 1000 / 22050 - said["audio_ms"] <= FRAME_MS
    assert got["turns"][0]["samples"] == got["turns"][1]["samples"]


def test_a_voice_set_at_run_time_speaks_from_the_next_turn(gateway, said):
    german = reference(gateway, TEXT, RATE, voice=GERMAN)
    assert german["audio_ms"] > 1.1 * said["audio_ms"]  # the voices tell apart (tests/voices.py)
    # A TTSSpeakFrame in the default voice, TTSUpdateSettingsFrame(voice=GERMAN), another.
    got = drive("speak", gateway, str(RATE), "0", TEXT, GERMAN)
    assert got["errors"] == [] and got["connected"] == 1
    for turn, voice in zip(got["turns"], (said, german), strict=True):
        assert 0 <= turn["samples"] * 1000 / RATE - voice["audio_ms"] <= FRAME_MS


def test_a_connection_the_gateway_closed_as_idle_is_replaced_at_the_next_turn(triton, gateways, said):
    # The gateway closes a connection idle for --idle-timeout with 1000, which is not
    # resumed: the next turn opens a new one, and speaks whole.
    idle = gateways.start(triton.grpc_url, "--probe-interval", "0", "--admission-load", "0", "--idle-timeout", "1")
    got = drive("speak", idle.url, str(RATE), "2", TEXT)
    assert got["errors"] == [] and (got["connected"], got["disconnected"]) == (2, 2)
    for turn in got["turns"]:
        assert 0 <= turn["samples"] * 1000 / RATE - said["audio_ms"] <= FRAME_MS


def test_a_gateway_going_away_mid_turn_is_resumed_on_the_next(triton, gateways):
    """Two gateways; the first is told to stop at the turn's third audio frame (SIGTERM,
    `--drain 1`) and closes with 1001 mid-paragraph: the turn goes on on the second,
    every word heard once, the audio as long as the unfaulted synthesis."""
    text = " ".join(harvard_sentences()[:60])  # its synthesis takes longer than the drain, on a fast host too
    flags = ("--probe-interval", "0", "--admission-load", "0")
    a = gateways.start(triton.grpc_url, *flags, "--drain", "1", name="a")
    b = gateways.start(triton.grpc_url, *flags, name="b")
    got = drive("resume", a.url, b.url, str(a.process.pid), str(SEED), text)
    assert a.process.wait(10) == 0
    whole = reference(b.url, text, 24000)
    assert (got["resumes"], got["connected"], got["errors"]) == (1, 1, [])
    assert got["rates"] == [24000] and got["rms"] > 0.02
    assert 0 <= got["samples"] / 24 - whole["audio_ms"] <= FRAME_MS
    words, times = [w for w, _ in got["words"]], [t for _, t in got["words"]]
    assert words == text.split() and np.all(np.diff(times) > 0)
    check_times(times, whole["start_s"])


def test_the_driver_reports_time_to_first_audio_per_concurrent_turn_and_pipecats_own_floor(gateway):
    got = drive("ttfa", gateway, "3", TEXT)
    assert got["errors"] == [] and len(got["ttfa_s"]) == 3
    assert all(0 < s < 10 for s in got["ttfa_s"])
    floor = drive("ttfa-floor", gateway, "3", TEXT)  # no server: a service with its audio at once
    assert floor["errors"] == [] and len(floor["ttfa_s"]) == 3
    assert 0 < max(floor["ttfa_s"]) < min(got["ttfa_s"])

