"""Build a multi-speaker Piper voice for tests: Piper's own VITS (`piper.train.vits`)
with random weights, exported to ONNX as Piper's `export_onnx` exports it (the
TorchScript exporter, opset 15, inputs input/input_lengths/scales/sid). No multi-speaker
voice can be downloaded on these machines, and no weights are committed: this script
makes one in seconds, deterministically (seed 0), with the embedded voice's phoneme map.

Its speech is noise (the weights are random); what tests check is the plumbing: that the
stages split like a real export, and that each speaker id reaches every stage.

Runs in the model-building environment (`.venv-build`: torch and piper-tts, made by
`scripts/setup.sh --tests`): python tests/build_multispeaker_voice.py CONFIG NAME DIRECTORY
writes NAME.onnx and NAME.onnx.json into DIRECTORY, with CONFIG's phoneme map.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from piper.train.vits.models import SynthesizerTrn

SPEAKERS = {"ana": 0, "ben": 1, "cy": 2}
RATE = 22050


def build(config: Path, directory: Path, name: str) -> None:
    settings = json.loads(config.read_text(encoding="utf-8"))
    torch.manual_seed(0)
    # Piper's medium architecture (hop 8·8·4 = 256 samples), narrower so tests run fast.
    model = SynthesizerTrn(
        settings["num_symbols"], 513, 32, 96, 96, 384, 2, 6, 3, 0.0, "2", (3, 5, 7), ((1, 2), (2, 6), (3, 12)),
        (8, 8, 4), 128, (16, 16, 8), n_speakers=len(SPEAKERS), gin_channels=64, use_sdp=True,
    ).eval()
    with torch.no_grad():
        model.dec.remove_weight_norm()
        # VITS starts its flow as the identity (zeroed output layers), which would leave
        # the flow deaf to the speaker: every weight gets noise. Speakers far apart, so
        # that tests tell them apart at each stage.
        for weight in model.parameters():
            weight.add_(torch.randn_like(weight) * 0.05)
        model.emb_g.weight.mul_(10)

    def infer(text, text_lengths, scales, sid):
        audio = model.infer(text, text_lengths, sid=sid, noise_scale=scales[0], length_scale=scales[1],
                            noise_scale_w=scales[2])[0]
        return audio.unsqueeze(1)

    model.forward = infer
    example = (torch.randint(0, settings["num_symbols"], (1, 50)), torch.LongTensor([50]),
               torch.FloatTensor([0.667, 1.0, 0.8]), torch.LongTensor([0]))
    directory.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model, example, str(directory / f"{name}.onnx"), opset_version=15, dynamo=False,
        input_names=["input", "input_lengths", "scales", "sid"], output_names=["output"],
        dynamic_axes={"input": {0: "batch_size", 1: "phonemes"}, "input_lengths": {0: "batch_size"},
                      "output": {0: "batch_size", 2: "time"}},
    )
    settings.update(num_speakers=len(SPEAKERS), speaker_id_map=SPEAKERS, dataset="trio-test")
    settings["audio"]["sample_rate"] = RATE
    (directory / f"{name}.onnx.json").write_text(json.dumps(settings), encoding="utf-8")


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[3]), sys.argv[2])
