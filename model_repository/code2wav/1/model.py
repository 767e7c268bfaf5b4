"""Triton shim for Code2Wav of the autoregressive family: windows of frames of SNAC codes
→ PCM, batched (python_backends.ar.code2wav). Tensors cross by DLPack, so on a GPU
instance (configs/gpu.pbtxt) codes that arrive on the device and the PCM stay there."""

import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_AR_PYTHONPATH", "").split(os.pathsep))  # the stub ignores PYTHONPATH

import locale

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")  # the stub starts with an ASCII locale; torch reads UTF-8 files

from pathlib import Path

import triton_python_backend_utils as pb_utils

from contract import models as c
from python_backends.serving import declare, parameters, run_by_key

# torch and SNAC are imported by the instances, not at the top: Triton reads the config
# (auto-complete) in a stub of its own each time it loads the model, and so each time the
# supervisor reloads it to replace a lost instance, while the lost instance still gets
# windows (a second or so each, until the reload ends).


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        return declare(config, c.CODE2WAV_MODEL)

    def initialize(self, args):
        import torch

        from python_backends.ar.code2wav import Code2WavEngine

        p = parameters(args)
        torch.set_num_threads(int(p.get("threads", "1")))
        gpu = args["model_instance_kind"] == "GPU"
        device = f"cuda:{args['model_instance_device_id']}" if gpu else "cpu"
        snac = Path(os.environ["SPEECHSTREAM_AR_MODEL"]) / "snac"
        self.engine = Code2WavEngine(snac, device=device, noise=p.get("noise", "true") == "true")

    def execute(self, requests):
        import torch  # loaded by initialize: a lookup
        from torch.utils.dlpack import to_dlpack

        # The dynamic batcher joins windows of any length: one decoder run per length.
        windows = [torch.from_dlpack(pb_utils.get_input_tensor_by_name(r, c.CODES).to_dlpack()) for r in requests]
        pcm = run_by_key([tuple(w.shape) for w in windows],
                         lambda _, same: self.engine.decode_tensor(torch.cat([windows[i] for i in same])))
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor.from_dlpack(c.PCM, to_dlpack(x))]) for x in pcm]
