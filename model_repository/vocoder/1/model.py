"""Triton shim for the vocoder stage (Code2Wav): latent windows → PCM, batched."""

# The Python backend stub runs an isolated interpreter (PYTHONPATH is ignored); the
# launcher names the project and its virtual environment here instead.
import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

import numpy as np
import triton_python_backend_utils as pb_utils

from python_backends import contract as c
from python_backends.engines import VocoderEngine
from python_backends.triton_glue import declare, parameters, response
from python_backends.voice import DEFAULT_VOICE, load_voice


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return declare(config, c.VOCODER_MODEL)

    def initialize(self, args):
        p = parameters(args)
        self.engine = VocoderEngine(load_voice(p.get("voice", DEFAULT_VOICE)), threads=int(p.get("threads", "1")))

    def execute(self, requests):
        # The dynamic batcher may join windows of different lengths: one run per length.
        latents = [pb_utils.get_input_tensor_by_name(r, c.LATENT).as_numpy() for r in requests]
        pcm = [None] * len(latents)
        for shape in {x.shape for x in latents}:
            same = [i for i, x in enumerate(latents) if x.shape == shape]
            audio = self.engine.vocode(np.concatenate([latents[i] for i in same]))
            for row, i in enumerate(same):
                pcm[i] = audio[row : row + 1]
        return [response({c.PCM: x}) for x in pcm]
