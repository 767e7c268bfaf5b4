"""The client library's listen mode and `speechstream-listen` against a gateway with
--listen and Triton's recognizer: a WAV file's speech (spoken by the embedded voice)
dictated through `SpeechClient` in real time, and through the CLI as a subprocess; the
CLI's one-line refusal by a gateway without a recognizer."""

import asyncio
import subprocess
import sys
import wave

import numpy as np
import pytest

from speechstream.client import SpeechClient, SpeechStarted, SpeechStopped, Transcript
from speechstream.media.decoding import decode_audio
from tests.speech import silence, spoken, word_error_rate

QUESTION = "What is your favorite kind of music to listen to on a rainy day?"
ANSWER = "I like to listen to quiet piano music when it rains."
RATE = 22050  # the files': the client decodes and resamples them to 16 kHz


def write_wav(path, pcm: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """A WAV of the question, then the answer after a pause: (path, where the question's speech ends in s)."""
    question = spoken(QUESTION, RATE)
    path = tmp_path_factory.mktemp("listen") / "recording.wav"
    write_wav(path, np.concatenate([silence(500, RATE), question, silence(1500, RATE), spoken(ANSWER, RATE),
                                    silence(500, RATE)]))
    return path, 0.5 + question.size / RATE


def test_a_wav_dictated_in_real_time_through_the_client_gets_its_finals(listen_gateway, recording):
    path, question_end_s = recording
    pcm = decode_audio(path.read_bytes(), 16000, 60)

    async def main():
        async with await SpeechClient.connect(listen_gateway.url, listen={}) as client:

            async def microphone():
                for i in range(0, pcm.size, 320):  # 20 ms messages, in real time
                    await client.send_audio(pcm[i:i + 320].tobytes())
                    await asyncio.sleep(0.02)
                await client.end_of_speech()

            sending = asyncio.create_task(microphone())
            heard = []
            async with asyncio.timeout(60):
                async for event in client.heard():
                    heard.append(event)
                    if sum(isinstance(e, Transcript) and e.final for e in heard) == 2:
                        break
            await sending
            return heard, client.microphone

    heard, microphone = asyncio.run(main())
    finals = [e.text for e in heard if isinstance(e, Transcript) and e.final]
    assert word_error_rate(QUESTION, finals[0]) <= 0.1 and word_error_rate(ANSWER, finals[1]) <= 0.1, finals
    assert [type(e) for e in heard if not isinstance(e, Transcript)] == [SpeechStarted, SpeechStopped] * 2
    stopped = next(e for e in heard if isinstance(e, SpeechStopped))
    assert abs(stopped.audio_ms / 1000 - question_end_s) <= 0.6
    assert microphone.sent_at(stopped.audio_ms) < stopped.at  # the end of speech left before it was heard


def test_speechstream_listen_prints_a_line_per_utterance(listen_gateway, recording):
    path, _ = recording
    run = subprocess.run([sys.executable, "-m", "speechstream.client.listen", str(path), "--fast", "--url", listen_gateway.url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 2 and "\x1b" not in run.stdout, run.stdout  # no terminal: no partials
    assert word_error_rate(QUESTION, lines[0]) <= 0.1 and word_error_rate(ANSWER, lines[1]) <= 0.1, lines


def test_speechstream_listen_on_a_gateway_without_a_recognizer_says_so(gateway, recording):
    path, _ = recording
    run = subprocess.run([sys.executable, "-m", "speechstream.client.listen", str(path), "--url", gateway],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stderr.startswith("speechstream-listen: listen_unavailable"), run.stderr
