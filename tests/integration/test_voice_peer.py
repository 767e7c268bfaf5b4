"""perf.voice.peer, the Pipecat pipeline perf.voice.end_to_end --peer measures beside the
voice chat: one question spoken by the embedded voice (as perf speaks it: a second of
silence, the question, then silence), pushed through its transports in real time, is heard
(its VAD, Smart Turn and Whisper), answered (llama.cpp's OpenAI-compatible server, which the
driver starts) and spoken (Piper) after the speech ended, and the driver leaves nothing
running. It runs in its own environment (.venv-peer, made by `scripts/setup.sh --tests` or
`--peer`; perf/voice/peer-requirements.txt says why)."""

import base64
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from contract.models import ASR_SAMPLE_RATE
from perf.voice.chat import SYSTEM
from tests.speech import silence, spoken, word_error_rate

ROOT = Path(__file__).parents[2]
PYTHON = ROOT / os.environ.get("PEER_VENV", ".venv-peer") / "bin" / "python"
QUESTION = "What is your favorite movie?"
MAX_WORD_ERROR_RATE = 0.25

pytestmark = pytest.mark.skipif(not PYTHON.exists(),
                                reason=f"{PYTHON} does not exist: `scripts/setup.sh --peer` (or --tests) makes it")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_peer_hears_a_spoken_question_answers_it_in_speech_after_it_ended_and_leaves_nothing_running(tmp_path):
    lead, speech = silence(1000), spoken(QUESTION)
    ask = {"question": QUESTION, "pcm": base64.b64encode(np.concatenate([lead, speech]).tobytes()).decode(),
           "rate": ASR_SAMPLE_RATE, "speech_end": lead.size + speech.size}
    run = subprocess.run([str(PYTHON), "-m", "perf.voice.peer", "--system", SYSTEM, "--max-tokens", "32",
                          "--server-log", str(tmp_path / "llama-server.log")],
                         cwd=ROOT, input=json.dumps(ask) + "\n", capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ready, heard = map(json.loads, run.stdout.splitlines())
    assert ready["ready"] and "error" not in heard, heard

    assert word_error_rate(QUESTION, heard["transcript"]) <= MAX_WORD_ERROR_RATE, heard["transcript"]
    assert heard["reply"].strip(), "no reply text came"
    # The reply was to the whole question: written, synthesized and sent after its last sample.
    assert 0 < heard["final_after_speech_s"] < heard["reply_after_speech_s"] < heard["voice_to_voice_s"], heard
    assert heard["first_audio_at"] > heard["speech_end_at"]
    assert gone(ready["llm_pid"]), f"llama.cpp's server (pid {ready['llm_pid']}) outlived the driver"
