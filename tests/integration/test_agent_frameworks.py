"""Voice-agent frameworks' OpenAI TTS clients, with their defaults, against the real
server: LiveKit Agents' OpenAI plugin (mp3 over SSE; once whole, once sentence by sentence
as an AgentSession streams it) and Pipecat's OpenAITTSService (pcm) in a pipeline. Each
decodes what it got; the audio must be real speech, all the server sent, and as long as
the text's synthesis.

The frameworks live in an environment of their own (.venv-agents, made by `scripts/setup.sh
--tests`; tests/agents-requirements.txt says why): tests/agent_driver.py runs there and
reports the audio as JSON."""

import json
import os
import subprocess
from pathlib import Path

from operations.loopback import triton_metrics
from tests.integration.test_speech_http import TEXT, base_url

ROOT = Path(__file__).parents[2]
DRIVER = ROOT / "tests" / "agent_driver.py"
PYTHON = ROOT / os.environ.get("AGENTS_VENV", ".venv-agents") / "bin" / "python"

# The clients send no seed, so the text's durations are drawn afresh on each request (its
# spread is about 1.2 % here); the seeded synthesis is their centre.
UNSEEDED = 0.05
# An mp3 decoder's output has the encoder's delay and its last frame's padding on top
# (about 30-40 ms a request here), as in tests/integration/test_speech_http.py.
MP3_MS = 120


def speak(gateway: str, client: str) -> tuple[dict, dict]:
    """What `client` got for TEXT, and what the server counted for it meanwhile."""
    port = int(base_url(gateway).split(":")[-1].removesuffix("/v1"))
    before = triton_metrics(port)  # the same Prometheus text parser reads the gateway's
    run = subprocess.run([str(PYTHON), str(DRIVER), client, base_url(gateway), TEXT],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    after = triton_metrics(port)
    served = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in
              ("speechstream_ttfp_seconds_count", "speechstream_audio_seconds_total", "speechstream_errors_total")}
    return json.loads(run.stdout.splitlines()[-1]), served


def check(got: dict, served: dict, requests: int, spoken_ms: float, codec_ms: float) -> None:
    assert (got["sample_rate"], got["channels"]) == (24000, 1)
    # Speech, not silence: a speaking level, with loud parts.
    assert got["rms"] > 0.02 and got["peak"] > 0.2
    # As many requests as the client made, each answered with audio, none refused.
    assert served["speechstream_ttfp_seconds_count"] == requests
    assert served["speechstream_errors_total"] == 0
    # All the server sent was decoded, nothing more but the codec's own delay and padding.
    # (The server counts seconds; in samples, a float's error rounds away.)
    served_samples = round(served["speechstream_audio_seconds_total"] * got["sample_rate"])
    assert 0 <= got["samples"] - served_samples <= codec_ms * requests * got["sample_rate"] // 1000
    got_ms = got["samples"] / got["sample_rate"] * 1000
    # And it is the text's synthesis: as long as the seeded one, within the seed's spread.
    assert abs(got_ms - spoken_ms) <= UNSEEDED * spoken_ms + codec_ms * requests


def test_livekit_openai_tts_synthesizes_the_text(gateway, spoken_ms):
    # openai.TTS() defaults: gpt-4o-mini-tts, voice "ash", mp3, speed 1.0, stream_format "sse".
    got, served = speak(gateway, "livekit")
    check(got, served, requests=1, spoken_ms=spoken_ms, codec_ms=MP3_MS)


def test_livekit_streams_it_sentence_by_sentence(gateway, spoken_ms):
    # The plugin is not a streaming TTS: an AgentSession wraps it in a StreamAdapter, which
    # cuts the incoming text into sentences and synthesizes each as it completes. A
    # sentence sounds the same alone as within the text (the seed is per sentence), so the
    # parts add up to the whole, but for each request's last frame padded to 20 ms.
    got, served = speak(gateway, "livekit-stream")
    check(got, served, requests=2, spoken_ms=spoken_ms + 20, codec_ms=MP3_MS)


def test_pipecat_openai_tts_service_speaks_the_text(gateway, spoken_ms):
    # OpenAITTSService() defaults: gpt-4o-mini-tts, voice "alloy", pcm at 24 kHz.
    got, served = speak(gateway, "pipecat")
    check(got, served, requests=1, spoken_ms=spoken_ms, codec_ms=0)
