"""tts_ar's stages over Triton's BLS: the talker model's stream of frames and the
code2wav model's decoding. Imported only inside Triton's Python backend."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import contract as c
from ..bls import BlsStages, string_tensor


@dataclass(frozen=True)
class ArBlsStages:
    """ArStages (python_backends.ar.pipeline) for one request's voice and sampling."""

    bls: BlsStages
    voice: str
    sampling: Mapping[str, np.ndarray]  # the Talker's sampling inputs, as the client sent them

    async def talk(self, text: str) -> AsyncIterator[np.ndarray]:
        """The Talker's frames; left early, the Talker is told to stop (STOP), since the
        BLS request itself cannot be cancelled and is read to its end."""
        name = string_tensor(c.STREAM_ID, uuid.uuid4().hex)
        inputs = [string_tensor(c.TEXT, text), string_tensor(c.VOICE, self.voice), name]
        inputs += [pb_utils.Tensor(key, value) for key, value in self.sampling.items()]
        async with aclosing(self.bls.stream(c.TALKER_MODEL, inputs, [c.CODES])) as responses:
            read_all = False
            try:
                async for r in responses:
                    yield pb_utils.get_output_tensor_by_name(r, c.CODES).as_numpy()
                read_all = True
            finally:
                if not read_all:
                    stop = [name, pb_utils.Tensor(c.STOP, np.array([True]))]
                    async with aclosing(self.bls.stream(c.TALKER_MODEL, stop, [c.CODES])) as ended:
                        async for _ in ended:
                            pass

    async def decode(self, window: np.ndarray) -> np.ndarray:
        codes = pb_utils.Tensor(c.CODES, np.ascontiguousarray(window[None], dtype=np.int32))
        return (await self.bls.infer(c.CODE2WAV_MODEL, [codes], c.PCM))[0]

