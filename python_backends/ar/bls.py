"""The autoregressive family's stages as BLS requests: one stream's requests to the
`talker` and `code2wav` models, for the `tts_ar` model (tts_ar_model.TtsArModel).
Imported only inside Triton's Python backend (needs its `pb_utils`)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

from contract import models as c
from python_backends.ar.inputs import TalkerParams
from python_backends.bls import Bls, string_tensor, tensors


@dataclass(frozen=True)
class BlsStages:
    """Stages (python_backends.ar.pipeline) of one stream: its voice and sampling reach
    the Talker of each sentence; `label` names it in the logs."""

    bls: Bls
    voice: str
    params: TalkerParams
    label: str

    async def talk(self, text: str) -> AsyncIterator[np.ndarray]:
        """The Talker's frames; left early, the Talker is told to stop (STOP), since the
        BLS request itself cannot be cancelled and is read to its end."""
        name = string_tensor(c.STREAM_ID, uuid.uuid4().hex)
        inputs = [string_tensor(c.TEXT, text), string_tensor(c.VOICE, self.voice), name]
        inputs += tensors(self.params.tensors())
        async with aclosing(self.bls.decoupled(c.TALKER_MODEL, inputs, [c.CODES])) as responses:
            read_all = False
            try:
                async for r in responses:
                    yield pb_utils.get_output_tensor_by_name(r, c.CODES).as_numpy()
                read_all = True
            finally:
                if not read_all:
                    stop = [name, pb_utils.Tensor(c.STOP, np.array([True]))]
                    async with aclosing(self.bls.decoupled(c.TALKER_MODEL, stop, [c.CODES])) as ended:
                        async for _ in ended:
                            pass

    async def decode(self, window: np.ndarray) -> np.ndarray:
        codes = pb_utils.Tensor(c.CODES, np.ascontiguousarray(window[None], dtype=np.int32))
        return (await self.bls.infer(c.CODE2WAV_MODEL, [codes], c.PCM, window.shape[0], self.label))[0]
