"""tts_ar's stages over Triton's BLS: the talker model's stream of frames and the
code2wav model's decoding. Imported only inside Triton's Python backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import contract as c
from ..bls import BlsStages


@dataclass(frozen=True)
class ArBlsStages:
    """ArStages (python_backends.ar.pipeline) for one request's voice and sampling."""

    bls: BlsStages
    voice: str
    sampling: Mapping[str, np.ndarray]  # the Talker's sampling inputs, as the client sent them

    async def talk(self, text: str) -> AsyncIterator[np.ndarray]:
        inputs = [pb_utils.Tensor(c.TEXT, np.array([text.encode()], dtype=object)),
                  pb_utils.Tensor(c.VOICE, np.array([self.voice.encode()], dtype=object))]
        inputs += [pb_utils.Tensor(name, value) for name, value in self.sampling.items()]
        async with aclosing(self.bls.stream(c.TALKER_MODEL, inputs, [c.CODES])) as responses:
            async for r in responses:
                yield pb_utils.get_output_tensor_by_name(r, c.CODES).as_numpy()

    async def decode(self, window: np.ndarray) -> np.ndarray:
        codes = pb_utils.Tensor(c.CODES, np.ascontiguousarray(window[None], dtype=np.int32))
        return (await self.bls.infer(c.CODE2WAV_MODEL, [codes], c.PCM))[0]
