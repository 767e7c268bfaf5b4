"""The Piper family's stages as BLS requests: one stream's requests to the `acoustic` and
`vocoder` models, for the `tts` model (tts_model.TtsModel). Imported only inside
Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

from contract import models as c
from contract.models import Phonemes, encode_phonemes
from python_backends.bls import Bls, string_tensor, tensors
from python_backends.piper.inputs import VoiceParams
from python_backends.piper.pipeline import LatentPiece


@dataclass(frozen=True)
class BlsStages:
    """Stages (python_backends.piper.pipeline) of one stream: its voice and parameters
    reach the acoustic stage, its voice and speaker every vocoder window; `label` names
    it in the logs."""

    bls: Bls
    voice: str
    params: VoiceParams
    label: str

    async def acoustic_pieces(
        self, text: str, head: int, phonemes: Phonemes = (), head_threads: int = 1, urgent: bool = False
    ) -> AsyncIterator[LatentPiece]:
        """One acoustic request for one sentence, its responses as pieces."""
        inputs = [string_tensor(c.TEXT, text), string_tensor(c.VOICE, self.voice), *tensors(self.params.tensors()),
                  pb_utils.Tensor(c.URGENT, np.array([urgent]))]
        if phonemes:
            inputs.append(string_tensor(c.PHONEMES, encode_phonemes(phonemes)))
        if head:
            inputs.append(pb_utils.Tensor(c.HEAD_FRAMES, np.array([head], dtype=np.int32)))
        if head_threads > 1:
            inputs.append(pb_utils.Tensor(c.HEAD_THREADS, np.array([head_threads], dtype=np.int32)))
        outputs = [c.LATENT, c.DURATIONS, c.WORDS, c.WORD_FRAMES]
        async with aclosing(self.bls.decoupled(c.ACOUSTIC_MODEL, inputs, outputs)) as responses:
            async for r in responses:
                yield latent_piece(r)

    async def vocode(self, window: np.ndarray, urgent: bool = False) -> np.ndarray:
        inputs = [
            pb_utils.Tensor(c.LATENT, window[None]), string_tensor(c.VOICE, self.voice, (1, 1)),
            pb_utils.Tensor(c.SPEAKER, np.array([[self.params.speaker]], dtype=np.int64)),
            pb_utils.Tensor(c.URGENT, np.array([[urgent]])),
        ]
        return (await self.bls.infer(c.VOCODER_MODEL, inputs, c.PCM, window.shape[1], self.label))[0]


def latent_piece(response) -> LatentPiece:
    """An acoustic response as a piece: the inverse of pipeline.acoustic_outputs."""
    output = functools.partial(pb_utils.get_output_tensor_by_name, response)
    spans, names = output(c.WORD_FRAMES).as_numpy(), output(c.WORDS).as_numpy()
    words = tuple((w.decode(), int(a), int(b)) for w, (a, b) in zip(names, spans))
    return LatentPiece(output(c.LATENT).as_numpy(), output(c.DURATIONS).as_numpy(), words)
