"""The `code2wav` model, Triton-facing: the autoregressive family's Code2Wav, windows of
frames of SNAC codes → PCM (code2wav.Code2WavEngine), batched (serving.BatchedModel).
Tensors cross by DLPack, so on a GPU instance (configs/gpu.pbtxt) codes that arrive on
the device and the PCM stay there. Imported only inside Triton's Python backend (needs
its `pb_utils`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import triton_python_backend_utils as pb_utils

from contract import models as c
from python_backends.serving import BatchedModel, parameters

if TYPE_CHECKING:
    import torch

# torch and SNAC are imported by the instances, not at the top: Triton reads the config
# (auto-complete) in a stub of its own each time it loads the model, and so each time the
# supervisor reloads it to replace a lost instance, while the lost instance still gets
# windows (a second or so each, until the reload ends).


class Code2WavModel(BatchedModel):
    model = c.CODE2WAV_MODEL

    def initialize(self, args) -> None:
        import torch

        from python_backends.ar.code2wav import Code2WavEngine

        p = parameters(args)
        torch.set_num_threads(int(p.get("threads", "1")))
        gpu = args["model_instance_kind"] == "GPU"
        device = f"cuda:{args['model_instance_device_id']}" if gpu else "cpu"
        snac = Path(os.environ["SPEECHSTREAM_AR_MODEL"]) / "snac"
        self.engine = Code2WavEngine(snac, device=device, noise=p.get("noise", "true") == "true")

    def window(self, request) -> tuple[tuple[int, ...], torch.Tensor]:
        """The dynamic batcher joins windows of any length: one decoder run per length."""
        import torch  # loaded by initialize: a lookup

        window = torch.from_dlpack(pb_utils.get_input_tensor_by_name(request, c.CODES).to_dlpack())
        return tuple(window.shape), window

    def run(self, key: tuple[int, ...], windows: list[torch.Tensor]) -> torch.Tensor:
        import torch  # loaded by initialize: a lookup

        return self.engine.decode_tensor(torch.cat(windows))

    def answer(self, key: tuple[int, ...], row: torch.Tensor):
        from torch.utils.dlpack import to_dlpack  # loaded by initialize: a lookup

        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor.from_dlpack(c.PCM, to_dlpack(row))])
