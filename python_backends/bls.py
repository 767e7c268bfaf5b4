"""The BLS models' stages over Triton: tts's requests to the acoustic and vocoder models
of the same server, and the generic decoupled and plain requests tts_ar's stages use. Imported only inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

from . import contract as c
from .streaming import LatentPiece


class BlsStages:
    """Stages (python_backends.streaming) as BLS requests, shared by all streams."""

    def __init__(self, waiters: int) -> None:
        # The BLS response iterator blocks; each decoupled request parks a thread on it.
        self._waiters = ThreadPoolExecutor(waiters, thread_name_prefix="stream-wait")

    def for_voice(self, name: str, speaker: int = 0) -> VoiceStages:
        return VoiceStages(self, name, speaker)

    async def acoustic_pieces(
        self, text: str, voice: Mapping[str, np.ndarray], head: int, voice_name: str
    ) -> AsyncIterator[LatentPiece]:
        """One acoustic request for one sentence, its responses as pieces."""
        inputs = [string_tensor(c.TEXT, text), string_tensor(c.VOICE, voice_name)]
        inputs += [pb_utils.Tensor(name, value) for name, value in voice.items()]
        if head:
            inputs.append(pb_utils.Tensor(c.HEAD_FRAMES, np.array([head], dtype=np.int32)))
        outputs = [c.LATENT, c.DURATIONS, c.WORDS, c.WORD_FRAMES]
        async with contextlib.aclosing(self.stream(c.ACOUSTIC_MODEL, inputs, outputs)) as responses:
            async for r in responses:
                yield latent_piece(r)

    async def stream(self, model: str, inputs: list, outputs: list[str]) -> AsyncIterator:
        """A decoupled request's responses, but the empty final one; a response that is
        an error raises StageError. The response iterator is read to its end even when
        the reading stops early (a failure, the reader cancelled): one dropped unread
        deadlocks the 2.51 stub when the model unloads."""
        request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs)
        responses = iter(await request.async_exec(decoupled=True))
        loop = asyncio.get_running_loop()
        read_all = False
        try:
            # The iterator blocks: each response is awaited in a waiter thread.
            while (r := await loop.run_in_executor(self._waiters, next, responses, None)) is not None:
                if r.has_error():
                    raise c.StageError(r.error().message())
                if pb_utils.get_output_tensor_by_name(r, outputs[0]) is not None:  # None: the empty final response
                    yield r
            read_all = True
        finally:
            if not read_all:
                await loop.run_in_executor(self._waiters, collections.deque, responses, 0)  # read to the end

    async def infer(self, model: str, inputs: list, output: str) -> np.ndarray:
        """A plain request's one output; an error raises StageError."""
        request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=[output])
        r = await request.async_exec()
        if r.has_error():
            raise c.StageError(r.error().message())
        return pb_utils.get_output_tensor_by_name(r, output).as_numpy()

    async def vocode(self, window: np.ndarray, voice_name: str, speaker: int) -> np.ndarray:
        inputs = [
            pb_utils.Tensor(c.LATENT, window[None]), string_tensor(c.VOICE, voice_name, [1, 1]),
            pb_utils.Tensor(c.SPEAKER, np.array([[speaker]], dtype=np.int64)),
        ]
        return (await self.infer(c.VOCODER_MODEL, inputs, c.PCM))[0]

    def close(self) -> None:
        self._waiters.shutdown(cancel_futures=True)


@dataclass(frozen=True)
class VoiceStages:
    """The Stages of one voice and speaker: BlsStages' requests, each naming the voice.
    The speaker reaches the acoustic stage among the voice parameters."""

    bls: BlsStages
    voice_name: str
    speaker: int

    def acoustic_pieces(self, text: str, voice: Mapping[str, np.ndarray], head: int) -> AsyncIterator[LatentPiece]:
        return self.bls.acoustic_pieces(text, voice, head, self.voice_name)

    def vocode(self, window: np.ndarray) -> Awaitable[np.ndarray]:
        return self.bls.vocode(window, self.voice_name, self.speaker)


def string_tensor(name: str, value: str, shape: tuple[int, ...] = (1,)):
    """A BYTES input holding one UTF-8 string."""
    return pb_utils.Tensor(name, np.array([value.encode()], dtype=object).reshape(shape))


def latent_piece(response) -> LatentPiece:
    """An acoustic response as a piece: the inverse of streaming.acoustic_outputs."""
    output = functools.partial(pb_utils.get_output_tensor_by_name, response)
    spans, names = output(c.WORD_FRAMES).as_numpy(), output(c.WORDS).as_numpy()
    words = tuple((w.decode(), int(a), int(b)) for w, (a, b) in zip(names, spans))
    return LatentPiece(output(c.LATENT).as_numpy(), output(c.DURATIONS).as_numpy(), words)
