"""Voices for tests beside the embedded one: no other Piper voice can be downloaded on
these machines (only the package registry is reachable).

- GERMAN is the embedded model with another name and language in its config: German
  phonemes (espeak-ng's `de`) and sentence rules, and a 16 kHz rate. The rate is a
  relabelling (the model makes 256 samples a frame whatever its config says, so this
  voice speaks lower and slower), which is what lets tests tell its audio path from the
  default's.
- TRIO is a multi-speaker Piper export with random weights and three speakers, built by
  tests/build_multispeaker_voice.py in the model-building environment; it speaks noise.

And the autoregressive family's tiny Orpheus-format model (tests/build_orpheus_model.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from perf.tools.workloads import HARVARD
from python_backends.cache import cache_dir
from python_backends.piper.voice import embedded_voice_files

ROOT = Path(__file__).resolve().parent.parent
BUILD_PYTHON = ROOT / os.environ.get("BUILD_VENV", ".venv-build") / "bin" / "python"
BUILDER = ROOT / "tests" / "build_multispeaker_voice.py"
AR_PYTHON = ROOT / os.environ.get("AR_VENV", ".venv-ar") / "bin" / "python"
ORPHEUS_BUILDER = ROOT / "tests" / "build_orpheus_model.py"
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
    config = embedded_voice_files()[1]
    built = cached_build(BUILD_PYTHON, BUILDER, [config, TRIO], f"{TRIO}.onnx.json")
    directory.mkdir(parents=True, exist_ok=True)
    for f in built.iterdir():
        if not (directory / f.name).exists():
            (directory / f.name).symlink_to(f)
    return directory


def build_orpheus_model() -> Path:
    """The tiny Orpheus-format model (tests/build_orpheus_model.py): talker/ and snac/,
    built once per builder version into the cache."""
    return cached_build(AR_PYTHON, ORPHEUS_BUILDER, [HARVARD], "snac/config.json")


def cached_build(python: Path, builder: Path, args: list, last_file: str) -> Path:
    """Run `python builder ARGS... DIRECTORY` once per version of the builder and its
    arguments, into the cache; `last_file` is the builder's last output (there: done)."""
    digest = hashlib.sha256(builder.read_bytes() + repr(args).encode()).hexdigest()[:16]
    built = cache_dir() / "test-models" / f"{builder.stem}-{digest}"
    if not (built / last_file).exists():
        if not python.exists():
            raise RuntimeError(f"no {python}: `scripts/setup.sh --tests` makes the environment {builder.name} runs in")
        staging = built.with_name(built.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        done = subprocess.run([python, builder, *args, staging], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{builder.name} failed:\n{done.stderr[-4000:]}")
        shutil.rmtree(built, ignore_errors=True)
        staging.rename(built)
    return built


def ar_check(script: str, *args: str, timeout: float = 300, env: dict[str, str] | None = None) -> dict:
    """Run tests/`script` in the vLLM environment (with `args`, and `env` over this
    process's) and read the JSON line it prints last."""
    run = subprocess.run([str(AR_PYTHON), str(ROOT / "tests" / script), *args], capture_output=True, text=True,
                         timeout=timeout, check=True, env=os.environ | (env or {}))
    return json.loads(run.stdout.splitlines()[-1])
