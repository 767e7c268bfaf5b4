"""Voices for tests beside the embedded one: no other Piper voice can be downloaded on
these machines (only the package registry is reachable).

- GERMAN is the embedded model with another name and language in its config: German
  phonemes (espeak-ng's `de`) and sentence rules, and a 16 kHz rate. The rate is a
  relabelling (the model makes 256 samples a frame whatever its config says, so this
  voice speaks lower and slower), which is what lets tests tell its audio path from the
  default's.
- TRIO is a multi-speaker Piper export with random weights and three speakers, built by
  tests/build_multispeaker_voice.py in the model-building environment; it speaks noise.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from python_backends.voice import cache_dir, embedded_voice_files

ROOT = Path(__file__).resolve().parent.parent
BUILD_PYTHON = ROOT / os.environ.get("BUILD_VENV", ".venv-build") / "bin" / "python"
BUILDER = ROOT / "tests" / "build_multispeaker_voice.py"
TRIO = "en_US-trio-test"

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


def build_trio_voice(directory: Path) -> Path:
    """Write TRIO into `directory`; return the directory. The export (about 10 s) is
    cached by the builder's digest, so a test session builds it once."""
    built = cache_dir() / "test-voices" / hashlib.sha256(BUILDER.read_bytes() + TRIO.encode()).hexdigest()[:16]
    if not (built / f"{TRIO}.onnx.json").exists():
        staging = built.with_name(built.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        config = embedded_voice_files()[1]
        if not BUILD_PYTHON.exists():
            raise RuntimeError(f"no {BUILD_PYTHON}: `scripts/setup.sh --tests` makes the model-building environment")
        done = subprocess.run([BUILD_PYTHON, BUILDER, config, staging, TRIO], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{BUILDER.name} failed:\n{done.stderr[-4000:]}")
        shutil.rmtree(built, ignore_errors=True)
        staging.rename(built)
    directory.mkdir(parents=True, exist_ok=True)
    for f in built.iterdir():
        if not (directory / f.name).exists():
            (directory / f.name).symlink_to(f)
    return directory
