"""speechstream's LiveKit Agents TTS plugin (speechstream/livekit.py) in the real
framework (livekit-agents in .venv-agents, driven by tests/livekit_driver.py) against the
real gateway and Triton: a stream fed an LLM's deltas, a one-shot `synthesize`, an
interruption (the stream closed mid-sentence) and the next stream on the same socket, and
several streams at once. The audio must be the text's synthesis, all the server sent,
with word timings that fall on it and join into the text."""

import json
import os
import subprocess
from pathlib import Path

from operations.loopback import triton_metrics
from speechstream.client import SyncSpeechClient
from tests.integration.test_speech_http import SEED, TEXT

ROOT = Path(__file__).parents[2]
DRIVER = ROOT / "tests" / "livekit_driver.py"
PYTHON = ROOT / os.environ.get("AGENTS_VENV", ".venv-agents") / "bin" / "python"
RATE = 24000  # the plugin's default
# Four sentences spoken in full, then one the LLM is still writing when the user speaks.
SENTENCES = ("It is easy to tell the depth of a well. These days a chicken leg is a rare dish. "
             "Rice is often served in round bowls. The juice of lemons makes fine punch.")
LONG_TEXT = SENTENCES + " The box was thrown beside the"
# The server pads a context's last frame to 20 ms; LiveKit's AudioEmitter may end a
# segment with a 10 ms silent marker frame (after a flush released its held-back tail).
PAD_MS, MARKER_MS = 20, 10


def drive(gateway: str, *args: str) -> tuple[dict, dict]:
    """What the driver printed, and what the gateway counted meanwhile."""
    port = int(gateway.split(":")[-1].split("/")[0])
    before = triton_metrics(port)  # the same Prometheus parser reads the gateway's
    run = subprocess.run([str(PYTHON), str(DRIVER), *args], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    after = triton_metrics(port)
    served = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in
              ("speechstream_ttfp_seconds_count", "speechstream_audio_seconds_total", "speechstream_errors_total")}
    return json.loads(run.stdout.splitlines()[-1]), served


def check_speech(got: dict, spoken_ms: float, text: str) -> None:
    """PCM at the asked rate, speech, the seeded synthesis's length, and word timings
    that join into the text, in order, on the audio's voiced parts."""
    assert (got["sample_rate"], got["channels"]) == (RATE, 1)
    assert got["rms"] > 0.02 and got["peak"] > 0.2
    got_ms = got["samples"] / RATE * 1000
    assert 0 <= got_ms - spoken_ms <= PAD_MS + MARKER_MS, (got_ms, spoken_ms)
    words = got["words"]
    assert "".join(w for w, *_ in words) == text
    assert [w.strip() for w, *_ in words] == text.split()
    starts, ends = [s for _, s, _, _ in words], [e for _, _, e, _ in words]
    assert all(s < e for s, e in zip(starts, ends))
    assert all(e <= s for e, s in zip(ends, starts[1:])), "words in order, none overlapping the next"
    assert 0 <= starts[0] < 0.2 and got_ms / 1000 - 0.15 <= ends[-1] <= got_ms / 1000
    assert min(level for *_, level in words) > 0.01, "each word's time holds speech"


def check_served(got: dict, served: dict, contexts: int) -> None:
    """Every context answered with audio, none refused, and all the server sent arrived."""
    assert served["speechstream_ttfp_seconds_count"] == contexts
    assert served["speechstream_errors_total"] == 0
    served_samples = round(served["speechstream_audio_seconds_total"] * RATE)
    assert 0 <= got["samples"] - served_samples <= MARKER_MS * RATE // 1000


def test_a_stream_fed_llm_deltas_speaks_them_with_aligned_words(gateway, spoken_ms):
    got, served = drive(gateway, "stream", gateway, TEXT, "--seed", str(SEED))
    # A native streaming TTS: an AgentSession uses its stream() as it is, no StreamAdapter.
    assert got["streaming"] and got["aligned_transcript"]
    assert got["stream_class"] == "speechstream.livekit.SynthesizeStream"
    check_speech(got, spoken_ms, TEXT)
    check_served(got, served, contexts=1)


def test_synthesize_speaks_the_text_at_once(gateway, spoken_ms):
    got, served = drive(gateway, "synthesize", gateway, TEXT, "--seed", str(SEED))
    check_speech(got, spoken_ms, TEXT)
    check_served(got, served, contexts=1)


def test_an_interruption_cancels_the_context_and_the_next_stream_speaks_on_the_same_socket(gateway, spoken_ms):
    with SyncSpeechClient.connect(gateway, format="pcm_s16le", sample_rate=RATE, seed=SEED) as ws:
        list(ws.speak(SENTENCES))
        sentences_ms = ws.done["audio_ms"]
    got, served = drive(gateway, "cancel", gateway, LONG_TEXT, TEXT, "--seed", str(SEED))
    # Cancelled on the server: its context gone at once, its audio cut after the first
    # frames (spoken to its end, or left open, it would have gone on through four sentences).
    assert got["contexts_gone_s"] is not None and got["contexts_gone_s"] < 2.0
    assert 0 < got["cancelled_audio_s"] * 1000 < sentences_ms / 4
    assert got["audio_after_cancel_s"] == 0
    assert got["errors"] == 0
    # One socket, the same before and after the cancel, closed with the TTS.
    before, cancelled, after = got["connections"]
    assert cancelled == after == before + 1
    assert got["sessions"][0] is not None and got["sessions"][0] == got["sessions"][1]
    assert got["closed_s"] is not None
    # The next stream is whole.
    check_speech(got["second"], spoken_ms, TEXT)
    assert served["speechstream_ttfp_seconds_count"] == 2 and served["speechstream_errors_total"] == 0


def test_streams_at_once_share_the_socket_and_report_time_to_first_audio(gateway, spoken_ms):
    got, served = drive(gateway, "ttfa", gateway, "3", TEXT)
    assert got["streams"] == 3 and len(got["ttfa_s"]) == 3 and got["session"]
    assert all(0 < t < 10 for t in got["ttfa_s"])
    # Unseeded, each turn's length is drawn afresh (about 1.2 % apart here), as in test_agent_frameworks.
    assert all(abs(a * 1000 - spoken_ms) <= 0.05 * spoken_ms for a in got["audio_s"])
    assert served["speechstream_ttfp_seconds_count"] == 4  # the warm-up and the three
    assert served["speechstream_errors_total"] == 0
