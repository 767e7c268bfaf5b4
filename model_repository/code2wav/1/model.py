"""Triton shim for Code2Wav of the autoregressive family: windows of frames of SNAC codes
→ PCM, batched (python_backends.ar.code2wav)."""

# The stub's isolated interpreter ignores PYTHONPATH; the launcher names the project and
# the AR environment (torch, snac) here instead.
import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_AR_PYTHONPATH", "").split(os.pathsep))

import locale

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")  # the stub starts with an ASCII locale; torch reads UTF-8 files

from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

from python_backends import contract as c
from python_backends.ar.code2wav import Code2WavEngine
from python_backends.triton_glue import declare, parameters, response, run_by_key


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return declare(config, c.CODE2WAV_MODEL)

    def initialize(self, args):
        p = parameters(args)
        torch.set_num_threads(int(p.get("threads", "1")))
        snac = Path(os.environ["SPEECHSTREAM_AR_MODEL"]) / "snac"
        self.engine = Code2WavEngine(snac, noise=p.get("noise", "true") == "true")

    def execute(self, requests):
        # The dynamic batcher joins windows of any length: one decoder run per length.
        windows = [pb_utils.get_input_tensor_by_name(r, c.CODES).as_numpy() for r in requests]
        pcm = run_by_key([w.shape for w in windows],
                         lambda _, same: self.engine.decode(np.concatenate([windows[i] for i in same])))
        return [response({c.PCM: x}) for x in pcm]
