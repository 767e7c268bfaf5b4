"""The tts engine over the in-process engines, as the Triton models run it, for the
tests that need synthesis but not Triton."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from contract import models as c
from contract.voices import EMBEDDED
from python_backends.chunking import sized_for_load
from python_backends.delivery import AudioChunk
from python_backends.piper.inputs import VoiceParams, read_tts_request
from python_backends.piper.pipeline import Latent, speak
from python_backends.scheduler import DeadlineScheduler, PlaybackClock


class EngineStages:
    """Stages over the in-process engines, as the acoustic and vocoder models run them;
    `calls` logs each vocoder window's frames."""

    def __init__(self, acoustic, vocoder, params=VoiceParams()):
        self.acoustic, self.vocoder, self.calls = acoustic, vocoder, []
        self.params = params.over(acoustic.default_params())
        self.workers = ThreadPoolExecutor(2)

    def acoustic_pieces(self, text, head, phonemes=(), head_threads=1, urgent=False):
        return self.acoustic.pieces(text, self.params, head, self.workers, phonemes, head_threads)

    async def vocode(self, window, urgent=False):
        self.calls.append(window.shape[1])
        loop = asyncio.get_running_loop()
        return (await loop.run_in_executor(self.workers, self.vocoder.vocode, window[None]))[0]


def strings(*values):
    return np.array([v.encode() for v in values], dtype=object)


async def stream_request(
    stages, inputs, *, loaded=False, together=False, cancel_after=None, pad_to_buckets=False, scheduler=None
) -> list[AudioChunk]:
    """The chunks of a tts request of `inputs`, synthesized by `stages` as the tts model
    does, chunked as it chunks a stream while `loaded` (its calls would queue) or
    not, and while other streams start `together` with it (a whole first chunk) or not."""
    request = read_tts_request(inputs, c.MAX_TEXT_CHARS)
    chunking, head = sized_for_load(request.chunking, request.chunking_asked, loaded)
    out = []
    stages.params = request.params.over(stages.acoustic.default_params())
    async for chunk in speak(
        request.sentences, stages, scheduler=scheduler or DeadlineScheduler(2), chunking=chunking,
        head=head, clock=PlaybackClock(EMBEDDED.sample_rate), pad_to_buckets=pad_to_buckets,
        grow=not request.chunking_asked, first_floor=lambda: chunking.frames if together else 0,
        is_cancelled=lambda: cancel_after is not None and len(out) >= cancel_after,
    ):
        out.append(chunk)
    return out


def whole_latent(array: np.ndarray) -> Latent:
    """A sentence's latent with all its frames in."""
    latent = Latent(*array.shape)
    latent.extend(array)
    return latent
