"""Code2Wav for the Orpheus format: SNAC's decoder, frames of codes → 24 kHz PCM, for
batches of equal-length windows (torch; no Triton here, the model wraps it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from . import orpheus


class Code2WavEngine:
    """A SNAC decoder loaded from a local directory (its `config.json` and
    `pytorch_model.bin`, as `hubertsiuzdak/snac_24khz` comes)."""

    def __init__(self, directory: str | Path, device: str = "cpu", noise: bool = True) -> None:
        from snac import SNAC
        from snac.layers import NoiseBlock

        self.device = torch.device(device)
        self.model = SNAC.from_pretrained(str(directory)).eval().to(self.device)
        if not noise:  # SNAC's decoder adds fresh noise on every call; without, decoding is deterministic
            for module in self.model.decoder.modules():
                if isinstance(module, NoiseBlock):
                    module.forward = _unchanged
        self.sample_rate = int(self.model.sampling_rate)

    @torch.inference_mode()
    def decode(self, windows: np.ndarray) -> np.ndarray:
        """[batch, frames, 7] codes → [batch, frames · 2048] float32 PCM in [-1, 1]."""
        books = [np.stack(b) for b in zip(*(orpheus.snac_codes(w) for w in windows))]
        codes = [torch.from_numpy(b).to(self.device) for b in books]
        audio = self.model.decode(codes)[:, 0]
        return audio.clamp(-1, 1).float().cpu().numpy()


def _unchanged(x: torch.Tensor) -> torch.Tensor:
    return x
