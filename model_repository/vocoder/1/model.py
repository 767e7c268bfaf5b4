"""Triton shim for the vocoder stage (Code2Wav): latent windows → PCM, batched."""

import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))  # the stub ignores PYTHONPATH

import numpy as np
import triton_python_backend_utils as pb_utils

from contract import models as c
from contract.voices import configured_voices
from python_backends.piper.engines import VocoderEngine
from python_backends.serving import declare, error, parameters, response, run_by_key
from python_backends.piper.voice import load_voice


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return declare(config, c.VOCODER_MODEL)

    def initialize(self, args):
        p = parameters(args)
        threads = int(p.get("threads", "1"))
        self.engines = {name: VocoderEngine(load_voice(info), threads) for name, info in configured_voices().items()}

    def execute(self, requests):
        # The dynamic batcher may join windows of different voices and lengths: one run each.
        latents = [pb_utils.get_input_tensor_by_name(r, c.LATENT).as_numpy() for r in requests]
        voices = [voice_of(r) for r in requests]
        speakers = [speaker_of(r) for r in requests]

        def vocode(key, same):
            voice, _ = key
            if voice in self.engines:
                return self.engines[voice].vocode(np.concatenate([latents[i] for i in same]), [speakers[i] for i in same])
            return None

        pcm = run_by_key(list(zip(voices, (x.shape for x in latents))), vocode)
        return [error(f"unknown voice {v!r}") if x is None else response({c.PCM: x}) for v, x in zip(voices, pcm)]


def voice_of(request) -> str:
    """The window's voice: its VOICE input, else the default."""
    tensor = pb_utils.get_input_tensor_by_name(request, c.VOICE)
    return c.DEFAULT_VOICE if tensor is None else tensor.as_numpy().reshape(-1)[0].decode()


def speaker_of(request) -> int:
    """The window's speaker id (tts checked it against the voice), else 0."""
    tensor = pb_utils.get_input_tensor_by_name(request, c.SPEAKER)
    return 0 if tensor is None else int(tensor.as_numpy().reshape(-1)[0])
