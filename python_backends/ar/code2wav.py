"""Code2Wav for the Orpheus format: SNAC's decoder, frames of codes → 24 kHz PCM, for
batches of equal-length windows (torch; no Triton here, the model wraps it).

Tensors stay on the engine's device from input to output (the model hands them over by
DLPack). On a GPU, windows are padded up to fixed sizes (`WINDOW_BUCKETS` frames, batches
to `BATCH_BUCKETS`) so that each size is one CUDA graph, captured on first use and
replayed after; padding repeats the last frame after the window, which SNAC's decoder
hears only within its reach (about 2 frames) of the window's end, where the connector's
right context is cut off anyway.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from python_backends.ar import orpheus

# A window is a chunk (1 to 16 frames by the contract's AR_CHUNK_PARAMS) plus up to 2 + 2
# frames of context: 20 at most.
WINDOW_BUCKETS = (4, 8, 12, 16, 20, 32, 48, 64)
BATCH_BUCKETS = (1, 2, 4, 8)  # code2wav's max_batch_size is 8


def bucket(n: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket that holds `n`; `n` itself past the largest."""
    return next((b for b in buckets if b >= n), n)


def pad_windows(windows: torch.Tensor, frames: int, batch: int) -> torch.Tensor:
    """[B, F, 7] → [batch, frames, 7]: each window's last frame repeated after it, and
    copies of the last window as extra rows (their audio is dropped)."""
    b, f, _ = windows.shape
    padded = torch.cat([windows, windows[:, -1:].expand(b, frames - f, -1)], dim=1)
    return torch.cat([padded, padded[-1:].expand(batch - b, -1, -1)], dim=0)


def snac_books(windows: torch.Tensor) -> list[torch.Tensor]:
    """[B, F, 7] Orpheus frames → SNAC's three codebooks, [B, F], [B, 2F] and [B, 4F], on
    the windows' device: position p of a frame goes to codebook CODEBOOK_OF_POSITION[p],
    slot INDEX_IN_CODEBOOK[p] of that frame's codes there."""
    b, f, _ = windows.shape
    return [windows.index_select(2, index).reshape(b, f * len(index)).long() for index in _book_positions(windows.device)]


@functools.cache
def _book_positions(device: torch.device) -> tuple[torch.Tensor, ...]:
    """Each codebook's frame positions in slot order, as index tensors made once per device:
    a CUDA graph's capture allows no copy from unpinned host memory, so the first (warm-up)
    call makes them."""
    return tuple(
        torch.tensor([p for _, p in sorted((s, p) for p, (k, s) in enumerate(
            zip(orpheus.CODEBOOK_OF_POSITION, orpheus.INDEX_IN_CODEBOOK)) if k == book)], device=device)
        for book in range(3)
    )


class Code2WavEngine:
    """A SNAC decoder loaded from a local directory (its `config.json` and
    `pytorch_model.bin`, as `hubertsiuzdak/snac_24khz` comes)."""

    def __init__(self, directory: str | Path, device: str = "cpu", noise: bool = True,
                 buckets: bool | None = None) -> None:
        from snac import SNAC
        from snac.layers import NoiseBlock

        self.device = torch.device(device)
        self.model = SNAC.from_pretrained(str(directory)).eval().to(self.device)
        if not noise:  # SNAC's decoder adds fresh noise on every call; without, decoding is deterministic
            for module in self.model.decoder.modules():
                if isinstance(module, NoiseBlock):
                    module.forward = _unchanged
        self.sample_rate = int(self.model.sampling_rate)
        # On a CPU padding only costs; on a GPU it is what lets every size be a CUDA graph.
        self.buckets = self.device.type == "cuda" if buckets is None else buckets
        self._graphs = _CudaGraphs(self._decode_books) if self.device.type == "cuda" else None

    @torch.inference_mode()
    def decode_tensor(self, windows: torch.Tensor) -> torch.Tensor:
        """[B, F, 7] codes → [B, F · 2048] float32 PCM in [-1, 1], on the engine's device."""
        windows = windows.to(self.device)
        b, f, _ = windows.shape
        if self.buckets:
            windows = pad_windows(windows, bucket(f, WINDOW_BUCKETS), bucket(b, BATCH_BUCKETS))
        run = self._graphs.run if self._graphs is not None and self.buckets else self._decode_books
        audio = run(windows)
        return audio[:b, : f * orpheus.SAMPLES_PER_FRAME]

    def decode(self, windows: np.ndarray) -> np.ndarray:
        """decode_tensor for host arrays."""
        return self.decode_tensor(torch.from_numpy(np.ascontiguousarray(windows))).cpu().numpy()

    def _decode_books(self, windows: torch.Tensor) -> torch.Tensor:
        return self.model.decode(snac_books(windows))[:, 0].clamp(-1, 1).float()


class _CudaGraphs:
    """One CUDA graph per input shape, captured on first use (after a warm-up run on a
    side stream, as torch.cuda.graphs requires) and replayed with the input copied into
    its static buffer. Written for GPU hosts; not run on the CPU machine this was built on."""

    def __init__(self, decode) -> None:
        self._decode = decode
        self._graphs: dict[tuple[int, ...], tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}

    def run(self, windows: torch.Tensor) -> torch.Tensor:
        shape = tuple(windows.shape)
        if shape not in self._graphs:
            self._graphs[shape] = self._capture(windows)
        graph, static_in, static_out = self._graphs[shape]
        static_in.copy_(windows)
        graph.replay()
        return static_out.clone()

    def _capture(self, windows: torch.Tensor):
        static_in = windows.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._decode(static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self._decode(static_in)
        return graph, static_in, static_out


def _unchanged(x: torch.Tensor) -> torch.Tensor:
    return x
