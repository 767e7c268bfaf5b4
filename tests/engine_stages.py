"""The tts engine over the in-process engines, as the Triton models run it, for the
tests that need synthesis but not Triton."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from python_backends import contract as c
from python_backends.chunking import sized_for_load
from python_backends.requests import read_tts_request, read_voice_params
from python_backends.scheduler import DeadlineScheduler, PlaybackClock
from python_backends.streaming import PcmChunk, synthesize
from python_backends.catalog import EMBEDDED


class EngineStages:
    """Stages over the in-process engines, as the acoustic and vocoder models run them;
    `calls` logs each vocoder window's frames."""

    def __init__(self, acoustic, vocoder):
        self.acoustic, self.vocoder, self.calls = acoustic, vocoder, []
        self.workers = ThreadPoolExecutor(2)

    def acoustic_pieces(self, text, voice, head):
        params = read_voice_params(voice, self.acoustic.default_params())
        return self.acoustic.pieces(text, params, head, self.workers)

    async def vocode(self, window):
        self.calls.append(window.shape[1])
        loop = asyncio.get_running_loop()
        return (await loop.run_in_executor(self.workers, self.vocoder.vocode, window[None]))[0]


def strings(*values):
    return np.array([v.encode() for v in values], dtype=object)


async def stream_request(
    stages, inputs, *, loaded=False, cancel_after=None, pad_to_buckets=False, scheduler=None
) -> list[PcmChunk]:
    """The chunks of a tts request of `inputs`, synthesized by `stages` as the tts model
    does, chunked as it chunks a stream while `loaded` (streams outnumber the slots) or not."""
    request = read_tts_request(inputs, c.MAX_TEXT_CHARS)
    chunking, head = sized_for_load(request.chunking, request.chunking_asked, loaded)
    out = []
    async for chunk in synthesize(
        request.sentences, request.voice, stages, scheduler=scheduler or DeadlineScheduler(2), chunking=chunking,
        head=head, clock=PlaybackClock(EMBEDDED.sample_rate), pad_to_buckets=pad_to_buckets,
        is_cancelled=lambda: cancel_after is not None and len(out) >= cancel_after,
    ):
        out.append(chunk)
    return out
