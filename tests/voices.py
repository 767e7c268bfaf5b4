"""A second voice for tests, built from the embedded one: no other Piper voice can be
downloaded on these machines (only the package registry is reachable).

It is the same model with another name and language in its config: German phonemes
(espeak-ng's `de`) and sentence rules, and a 16 kHz rate. The rate is a relabelling
(the model makes 256 samples a frame whatever its config says, so this voice speaks
lower and slower), which is what lets tests tell its audio path from the default's.
"""

from __future__ import annotations

import json
from pathlib import Path

from python_backends.voice import embedded_voice_files

GERMAN = "de_DE-joe-medium"
GERMAN_RATE = 16000


def build_german_voice(directory: Path) -> Path:
    """Write GERMAN into `directory` (a link to the embedded model and its edited
    config); return the directory."""
    model, config = embedded_voice_files()
    directory.mkdir(parents=True, exist_ok=True)
    settings = json.loads(config.read_text(encoding="utf-8"))
    settings["audio"]["sample_rate"] = GERMAN_RATE
    settings["espeak"]["voice"] = "de"
    settings["language"] = {"code": "de_DE", "family": "de", "region": "DE", "name_english": "German"}
    target = directory / f"{GERMAN}.onnx"
    if not target.exists():
        target.symlink_to(model)
    (directory / f"{GERMAN}.onnx.json").write_text(json.dumps(settings), encoding="utf-8")
    return directory
