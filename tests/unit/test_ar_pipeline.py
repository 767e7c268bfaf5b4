"""tts_ar's engine (python_backends/ar/pipeline.py) over in-process stages: a Talker that
writes given frames, a few at a time, and a convolutional decoder that reaches one frame
either side, in numpy; the real stages run in tests/vllm/test_ar_triton.py."""

import asyncio

import numpy as np

from contract.text import Sentence
from python_backends.ar.connector import HURRY_FRAMES
from python_backends.ar.pipeline import speak
from python_backends.chunking import ChunkParams, chunk_sizes
from python_backends.scheduler import PlaybackClock

SPF = 4  # samples per frame
UNHURRIED = SPF  # a listener's rate at which a frame is a second of audio: never about to run dry here
KERNEL = np.hanning(2 * SPF + 1)  # reaches SPF samples, one frame, either side


def decode(frames: np.ndarray) -> np.ndarray:
    """A stand-in codec decoder with a known receptive field: each frame's codes summed,
    held for SPF samples, smoothed; zero beyond the window's edges, as a padded conv."""
    samples = np.repeat(frames.sum(axis=1).astype(np.float64), SPF)
    return np.convolve(samples, KERNEL, mode="full")[SPF : SPF + samples.size]


class Stages:
    def __init__(self, frames_of, batch=3):
        self.frames_of, self.batch, self.windows, self.batches_read = frames_of, batch, [], 0

    async def talk(self, text):
        frames = self.frames_of[text]
        for i in range(0, len(frames), self.batch):
            await asyncio.sleep(0)
            self.batches_read += 1
            yield frames[i : i + self.batch]

    async def decode(self, window):
        self.windows.append(len(window))
        return decode(window)


def collect(sentences, stages, params, cancel_after=None):
    async def run():
        out = []
        async for chunk in speak(sentences, stages, params, SPF, PlaybackClock(UNHURRIED),
                                 lambda: cancel_after is not None and len(out) >= cancel_after):
            out.append(chunk)
        return out
    return asyncio.run(run())


def test_chunked_audio_is_each_sentence_decoded_whole():
    rng = np.random.default_rng(0)
    sentences = [Sentence(0, 14, "One two three."), Sentence(15, 25, "Four five.")]
    frames = {s.text: rng.integers(0, 100, (n, 7)) for s, n in zip(sentences, (23, 5))}
    stages = Stages(frames)
    chunks = collect(sentences, stages, ChunkParams(1, 4, 1, 1))
    for number, sentence in enumerate(sentences):
        pcm = np.concatenate([c.pcm for c in chunks if c.sentence_index == number])
        np.testing.assert_allclose(pcm, decode(frames[sentence.text]), atol=1e-9)
    assert [c.sentence_index for c in chunks] == sorted(c.sentence_index for c in chunks)
    assert max(stages.windows) <= 4 + 1 + 1  # no window larger than a chunk and its context


def test_the_first_chunk_is_timed_once_talker_then_code2wav():
    sentences = [Sentence(0, 14, "One two three."), Sentence(15, 25, "Four five.")]
    frames = {s.text: np.zeros((n, 7), np.int64) for s, n in zip(sentences, (6, 5))}
    times = []

    async def run():
        chunks = speak(sentences, Stages(frames), ChunkParams(1, 4, 1, 1), SPF, PlaybackClock(UNHURRIED),
                       first_chunk=lambda *t: times.append(t))
        return [chunk async for chunk in chunks]

    assert len(asyncio.run(run())) > 1
    assert len(times) == 1 and 0 <= times[0][0] <= times[0][1]


def test_too_little_context_shows_at_the_joins():
    frames = {"a": np.random.default_rng(1).integers(0, 100, (20, 7))}
    chunks = collect([Sentence(0, 1, "a")], Stages(frames), ChunkParams(1, 4, 0, 0))
    assert not np.allclose(np.concatenate([c.pcm for c in chunks]), decode(frames["a"]))


def test_a_cancelled_request_stops_at_once():
    frames = {"a": np.zeros((40, 7), dtype=np.int64), "b": np.zeros((40, 7), dtype=np.int64)}
    stages = Stages(frames)
    chunks = collect([Sentence(0, 1, "a"), Sentence(2, 3, "b")], stages, ChunkParams(1, 2, 1, 1), cancel_after=2)
    assert len(chunks) == 2
    assert all(c.sentence_index == 0 for c in chunks)


def test_a_cancel_between_chunks_stops_the_talker_at_its_next_frames():
    """A grown chunk is many Talker outputs away: the cancel is seen at the next one, not
    when that chunk is due."""
    stages = Stages({"a": np.zeros((200, 7), dtype=np.int64)}, batch=1)
    chunks = collect([Sentence(0, 1, "a")], stages, ChunkParams(1, 100, 1, 1), cancel_after=1)
    assert len(chunks) == 1
    assert stages.batches_read <= 1 + 1 + 1  # the first chunk, its right context, the one that saw the cancel


class Timed(Stages):
    """A Talker that takes `step_s` per output on a clock of its own (`now`), and a
    decoder that takes no time."""

    def __init__(self, frames_of, step_s):
        super().__init__(frames_of, batch=1)
        self.now, self.step_s = 0.0, step_s

    async def talk(self, text):
        async for frames in super().talk(text):
            self.now += self.step_s
            yield frames


def spoken_sizes(step_s: float) -> tuple[list[int], np.ndarray, np.ndarray]:
    """A 60-frame sentence, each frame 0.1 s of audio, its Talker taking `step_s` a frame:
    the frames each chunk speaks, the audio, and the sentence decoded whole."""
    frames = {"a": np.random.default_rng(2).integers(0, 100, (60, 7))}
    stages = Timed(frames, step_s)

    async def run():
        clock = PlaybackClock(10 * SPF, now=lambda: stages.now)  # a frame is 0.1 s of audio
        return [c async for c in speak([Sentence(0, 1, "a")], stages, ChunkParams(1, 16, 1, 1), SPF, clock)]

    chunks = asyncio.run(run())
    return [c.pcm.size // SPF for c in chunks], np.concatenate([c.pcm for c in chunks]), decode(frames["a"])


def test_a_talker_ahead_of_its_listener_fills_every_chunk_to_its_size():
    sizes, pcm, whole = spoken_sizes(step_s=0.01)  # ten times real time
    schedule = chunk_sizes(1, 16)
    assert sizes[:-1] == [next(schedule) for _ in sizes[:-1]]
    np.testing.assert_allclose(pcm, whole, atol=1e-9)


def test_a_listener_about_to_run_dry_gets_the_frames_in_hand_rather_than_a_grown_chunk():
    """A Talker slower than real time (0.12 s a 0.1 s frame) could not fill the 8- and
    16-frame chunks before the audio in hand ran out: once less than HURRY_S is left, the
    frames in are decoded at once, in chunks of at least HURRY_FRAMES."""
    sizes, pcm, whole = spoken_sizes(step_s=0.12)
    schedule = chunk_sizes(1, 16)
    expected = [next(schedule) for _ in sizes]
    cut = [i for i, (size, planned) in enumerate(zip(sizes[:-1], expected)) if size != planned]
    assert cut and all(HURRY_FRAMES <= sizes[i] < expected[i] for i in cut)
    np.testing.assert_allclose(pcm, whole, atol=1e-9)  # the same audio, cut elsewhere
