"""The recognizer (`asr`) in a real Triton, over gRPC as the gateway speaks to it: questions
spoken by the embedded voice (synthesized in process, 16 kHz), sent in 100 ms requests in
real time where timing is what is tested, faster than real time (as a file) elsewhere."""

import queue
import re
import time
from dataclasses import dataclass

import numpy as np
import pytest

from contract import models as c
from operations.loopback import triton_metrics
from operations.triton_client import Stream, StreamError
from tests.speech import silence, spoken, word_errors, words

QUESTION = "What is your favorite kind of music to listen to on a rainy day?"
OTHER = "Who is your modern-day hero?"
REQUEST_MS = 100
MAX_WORD_ERRORS = 0.1  # of the words said


@pytest.fixture(scope="module")
def speech():
    return {text: spoken(text) for text in (QUESTION, OTHER)}


@dataclass(frozen=True)
class Heard:
    kind: str
    utterance: int
    audio_ms: int
    text: str
    at: float  # time.monotonic() when it arrived


class Microphone:
    """One listening stream on a gRPC stream of its own, as the gateway opens one per client."""

    def __init__(self, triton, stream_id: str) -> None:
        self.grpc, self.stream_id = Stream(triton.grpc_url), stream_id
        self.heard: list[Heard] = []

    def send(self, audio: np.ndarray | None = None, **flags) -> None:
        """A request: `audio`, and inputs by name (end=True is END)."""
        values = {c.STREAM_ID: self.stream_id, **{name.upper(): np.array([v]) for name, v in flags.items()}}
        if audio is not None:
            values[c.AUDIO] = audio
        self.grpc.send(c.ASR_MODEL, values)

    def listen(self, seconds: float = 0.0) -> list[Heard]:
        """The events that arrive within `seconds` (those already in, with 0)."""
        until = time.monotonic() + seconds
        while True:
            try:
                response = self.grpc.next(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                return self.heard
            if response.get(c.EVENT) is not None:
                self.heard.append(Heard(response.get(c.EVENT)[0].decode(), int(response.get(c.UTTERANCE)[0]),
                                        int(response.get(c.AUDIO_MS)[0]), response.get(c.TEXT)[0].decode(),
                                        time.monotonic()))

    def __enter__(self) -> "Microphone":
        return self

    def __exit__(self, *exc: object) -> None:
        self.grpc.close()  # an open gRPC stream holds Triton's stop


def pieces(audio: np.ndarray, ms: int = REQUEST_MS) -> list[np.ndarray]:
    step = ms * c.ASR_SAMPLE_RATE // 1000
    return [audio[i : i + step] for i in range(0, len(audio), step)]


def speak(microphones: dict[str, np.ndarray]) -> dict[str, float]:
    """Each microphone's audio sent in real time, all at once: when each sent its last request."""
    sent_at, started = {}, time.monotonic()
    requests = {mic: pieces(audio) for mic, audio in microphones.items()}
    for i in range(max(map(len, requests.values()))):
        for mic, theirs in requests.items():
            if i < len(theirs):
                mic.send(theirs[i])
                sent_at[mic] = time.monotonic()
            mic.listen()
        time.sleep(max(0.0, started + (i + 1) * REQUEST_MS / 1000 - time.monotonic()))
    return sent_at


def kinds(heard: list[Heard]) -> list[str]:
    return [h.kind for h in heard]


def streams_open(triton) -> float:
    return triton_metrics(triton.metrics_port)[c.ASR_STREAMS_METRIC]


def test_spoken_questions_are_heard_as_they_are_said_two_streams_at_once(triton, speech):
    said_a = np.concatenate([silence(1000), speech[QUESTION], silence(1000)])
    said_b = np.concatenate([silence(1500), speech[OTHER], silence(1500)])
    with Microphone(triton, "a") as a, Microphone(triton, "b") as b:
        started = time.monotonic()
        sent_at = speak({a: said_a, b: said_b})
        for mic in (a, b):
            mic.listen(0.0 if mic.heard and mic.heard[-1].kind == c.FINAL else 2.0)
            mic.send(stop=True)
            mic.listen(0.5)
    speech_sent_at = started + (1000 + len(speech[QUESTION]) * 1000 / c.ASR_SAMPLE_RATE) / 1000
    for mic, text in ((a, QUESTION), (b, OTHER)):
        assert kinds(mic.heard)[0] == c.SPEECH_STARTED and kinds(mic.heard)[-2:] == [c.SPEECH_STOPPED, c.FINAL]
        assert set(kinds(mic.heard)[1:-2]) == {c.PARTIAL} and {h.utterance for h in mic.heard} == {0}
        assert word_errors(text, mic.heard[-1].text) <= MAX_WORD_ERRORS * len(words(text)), mic.heard[-1].text
    assert abs(a.heard[0].audio_ms - 1000) <= 150
    assert abs(a.heard[-2].audio_ms - (1000 + len(speech[QUESTION]) // 16)) <= 200
    partials = [h for h in a.heard if h.kind == c.PARTIAL]
    assert sum(h.at < speech_sent_at for h in partials) >= 3  # the question heard while it is said
    for shorter, longer in zip(partials, partials[1:]):
        assert words(longer.text)[: len(words(shorter.text))] == words(shorter.text)  # no word taken back
    final = a.heard[-1]
    assert partials[-1].text == final.text and partials[-1].at < final.at  # the whole question before the endpoint
    assert final.at - speech_sent_at < 0.5 + 0.4  # at the 500 ms endpoint, not a pass after it
    assert sent_at[a] > final.at  # while the silence after it was still being sent
    assert streams_open(triton) == 0


def test_silence_alone_is_no_event(triton):
    with Microphone(triton, "quiet") as mic:
        for piece in pieces(silence(3000), 500):
            mic.send(piece)
        mic.send(stop=True)
        assert mic.listen(1.0) == []


def test_end_ends_the_utterance_at_once(triton, speech):
    with Microphone(triton, "push-to-talk") as mic:
        speak({mic: np.concatenate([silence(500), speech[OTHER]])})
        ended = time.monotonic()
        mic.send(end=True, endpoint_ms=np.int32(3000))
        heard = mic.listen(1.0)
        mic.send(stop=True)
    assert kinds(heard)[-2:] == [c.SPEECH_STOPPED, c.FINAL]
    assert heard[-1].at - ended < 0.6  # not the 3 s endpoint
    assert word_errors(OTHER, heard[-1].text) <= MAX_WORD_ERRORS * len(words(OTHER))


def test_a_file_sent_at_once_gives_each_utterance_its_span_and_final(triton, speech):
    """As the HTTP transcription API sends it: 1 s requests as fast as they go, no partials."""
    said = np.concatenate([silence(800), speech[QUESTION], silence(1200), speech[OTHER], silence(300)])
    with Microphone(triton, "file") as mic:
        for piece in pieces(said, 1000):
            mic.send(piece, partials=False)
        mic.send(end=True, stop=True)
        heard = mic.listen(5.0)
    assert kinds(heard) == [c.SPEECH_STARTED, c.SPEECH_STOPPED, c.FINAL] * 2
    assert [h.utterance for h in heard] == [0, 0, 0, 1, 1, 1]
    second_start = 800 + len(speech[QUESTION]) // 16 + 1200
    assert abs(heard[0].audio_ms - 800) <= 150 and abs(heard[3].audio_ms - second_start) <= 150
    for final, text in ((heard[2], QUESTION), (heard[5], OTHER)):
        assert word_errors(text, final.text) <= MAX_WORD_ERRORS * len(words(text)), final.text
    assert streams_open(triton) == 0


def test_stop_mid_utterance_ends_it_then_the_stream(triton, speech):
    half = np.concatenate([silence(500), speech[QUESTION][: len(speech[QUESTION]) // 2]])
    with Microphone(triton, "leaving") as mic:
        for piece in pieces(half, 1000):
            mic.send(piece, partials=False)
        mic.send(stop=True)
        heard = mic.listen(3.0)
    assert kinds(heard) == [c.SPEECH_STARTED, c.SPEECH_STOPPED, c.FINAL]
    assert words(heard[-1].text)[:3] == ["what", "is", "your"]
    assert streams_open(triton) == 0


@pytest.mark.parametrize("audio,error", [
    (np.zeros(2 * c.ASR_SAMPLE_RATE, np.int16), re.escape("the limit is 16000 (1000 ms) a request")),
    (np.zeros(1600, np.float32), "AUDIO"),  # Triton refuses a type the config does not declare
])
def test_a_bad_request_is_refused_and_the_next_stream_is_heard(triton, speech, audio, error):
    with Microphone(triton, "bad") as mic:
        mic.send(audio)
        with pytest.raises(StreamError, match=error):
            mic.listen(5.0)
    with Microphone(triton, "bad") as good:  # the same name: its state was left as it was
        for piece in pieces(np.concatenate([speech[OTHER], silence(700)]), 1000):
            good.send(piece, partials=False)
        heard = good.listen(3.0)
        good.send(stop=True)
    assert kinds(heard) == [c.SPEECH_STARTED, c.SPEECH_STOPPED, c.FINAL]
    metrics = triton_metrics(triton.metrics_port)
    assert metrics[c.ASR_PASSES_METRIC] > 0 and metrics[c.ASR_PASS_SECONDS_METRIC] > 0
    assert metrics[c.ASR_AUDIO_SECONDS_METRIC] >= len(speech[OTHER]) / c.ASR_SAMPLE_RATE
