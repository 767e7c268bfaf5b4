"""The `vocoder` model, Triton-facing: the Piper family's Code2Wav, latent windows → PCM
(engines.VocoderEngine, one per voice), batched (serving.BatchedModel). Imported only
inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import functools

import numpy as np
import triton_python_backend_utils as pb_utils

from contract import models as c
from contract.voices import configured_voices
from python_backends.inputs import read_urgent
from python_backends.piper.engines import VocoderEngine
from python_backends.piper.voice import load_voice
from python_backends.priority import background_pool
from python_backends.serving import BatchedModel, error, parameters, response

Key = tuple[str, tuple[int, ...], bool]  # a window's voice, shape and urgency: the windows one run vocodes
Window = tuple[np.ndarray, int]  # a window's latent frames and speaker


class VocoderModel(BatchedModel):
    model = c.VOCODER_MODEL

    def initialize(self, args) -> None:
        threads = int(parameters(args).get("threads", "1"))
        self.engines = {name: VocoderEngine(load_voice(info), threads) for name, info in configured_voices().items()}
        self.background = background_pool(1, "vocoder")  # windows not URGENT; urgent ones run on Triton's thread

    def window(self, request) -> tuple[Key, Window]:
        """The dynamic batcher may join windows of different voices, lengths and
        urgencies: one run each."""
        latent = pb_utils.get_input_tensor_by_name(request, c.LATENT).as_numpy()
        voice = voice_of(request)
        return (voice, latent.shape, urgent_of(request)), (latent, speaker_of(request))

    def run(self, key: Key, windows: list[Window]) -> np.ndarray | None:
        voice, _, urgent = key
        if voice not in self.engines:
            return None
        vocode = functools.partial(
            self.engines[voice].vocode, np.concatenate([latent for latent, _ in windows]), [s for _, s in windows])
        return vocode() if urgent else self.background.submit(vocode).result()

    def answer(self, key: Key, row: np.ndarray | None):
        voice, _, _ = key
        return error(f"unknown voice {voice!r}") if row is None else response({c.PCM: row})

    def finalize(self) -> None:
        self.background.shutdown()


def voice_of(request) -> str:
    """The window's voice: its VOICE input, else the default."""
    tensor = pb_utils.get_input_tensor_by_name(request, c.VOICE)
    return c.DEFAULT_VOICE if tensor is None else tensor.as_numpy().reshape(-1)[0].decode()


def speaker_of(request) -> int:
    """The window's speaker id (tts checked it against the voice), else 0."""
    tensor = pb_utils.get_input_tensor_by_name(request, c.SPEAKER)
    return 0 if tensor is None else int(tensor.as_numpy().reshape(-1)[0])


def urgent_of(request) -> bool:
    """Whether the window is URGENT (absent: not)."""
    tensor = pb_utils.get_input_tensor_by_name(request, c.URGENT)
    return read_urgent({} if tensor is None else {c.URGENT: tensor.as_numpy()})
