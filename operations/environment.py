"""What tritonserver runs with: the wheel's server and Python backend, the model
repository, the AR environment, the variables its Python stubs read, and the model
directories it is asked to serve, checked before it starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from contract.voices import AR_MODEL_ENV, CHAT_MODEL_ENV, EMBEDDED_CHAT, VOICES_ENV, VoiceError
from python_backends.cache import cache_dir

PROJECT_ROOT = Path(__file__).resolve().parents[1]
MODEL_REPOSITORY = PROJECT_ROOT / "model_repository"
GPU_CONFIG = "gpu"  # model_repository/*/configs/gpu.pbtxt: Triton's --model-config-name
# The AR family's environment (vLLM, torch, SNAC), made by `scripts/setup.sh --ar`.
AR_VENV = PROJECT_ROOT / os.environ.get("AR_VENV", ".venv-ar")


def pytriton_dir() -> Path:
    import pytriton

    return Path(pytriton.__file__).parent


def tritonserver_binary() -> Path:
    return pytriton_dir() / "tritonserver" / "bin" / "tritonserver"


def backend_directory() -> Path:
    """A backend directory holding the Python backend with this Python's stub."""
    source = pytriton_dir() / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = source / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise RuntimeError(f"nvidia-pytriton has no Python backend stub for Python {version}")
    target = cache_dir() / "backends" / f"python{version}"
    python = target / "python"
    if not (python / "triton_python_backend_stub").exists():
        python.mkdir(parents=True, exist_ok=True)
        for f in (source / "backends" / "python").iterdir():
            if f.is_file():
                shutil.copy2(f, python / f.name)
        shutil.copy2(stub, python / stub.name)
    return target


def server_environment(voices: str | None = None, ar_model: str | None = None,
                       chat_model: str | None = None) -> dict[str, str]:
    """The environment for tritonserver and its Python stubs.

    The stubs run the system's libpython in isolated mode, which ignores PYTHONPATH, so
    the model shims put SPEECHSTREAM_PYTHONPATH (the project and this environment's
    packages) on sys.path themselves; the server needs the wheel's own libraries. The
    models find the voices directory in $SPEECHSTREAM_VOICES. The AR family's Talker and
    Code2Wav take the AR environment's packages (SPEECHSTREAM_AR_PYTHONPATH) instead, and
    the model directory from $SPEECHSTREAM_AR_MODEL; the Thinker runs from the same
    environment, its chat model directory in $SPEECHSTREAM_CHAT_MODEL.
    """
    env = dict(os.environ)
    if voices:
        env[VOICES_ENV] = voices
    if ar_model:
        env[AR_MODEL_ENV] = str(Path(ar_model).resolve())
    if chat_model:
        env[CHAT_MODEL_ENV] = str(Path(chat_model).resolve())
    if ar_model or chat_model:
        env["SPEECHSTREAM_AR_PYTHON"] = str(AR_VENV / "bin" / "python")
        site = AR_VENV / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
        env["SPEECHSTREAM_AR_PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), str(site)])
    libs = pytriton_dir().parent / "nvidia_pytriton.libs"
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
    paths = [str(PROJECT_ROOT)] + [p for p in sys.path if p.endswith("site-packages")]
    env["SPEECHSTREAM_PYTHONPATH"] = os.pathsep.join(paths)
    return env


def check_ar_model(directory: str) -> None:
    """VoiceError, saying what to do, unless the AR family can start from `directory`."""
    missing = [part for part in ("talker", "snac") if not (Path(directory) / part).is_dir()]
    if missing:
        raise VoiceError(f"AR model {directory}: no {' or '.join(missing)} directory in it (an Orpheus-format "
                         "model directory holds talker/, the Llama, and snac/, its SNAC decoder)")
    if not (AR_VENV / "bin" / "python").exists():
        raise VoiceError(f"AR model {directory}: no AR environment at {AR_VENV}; run `scripts/setup.sh --ar`")


def chat_model_dir(chat_model: str) -> str:
    """The chat model's directory: `chat_model` itself, or for EMBEDDED_CHAT the embedded
    SmolLM2, converted from its GGUF once (in the vLLM environment, which reads GGUF)."""
    if not (AR_VENV / "bin" / "python").exists():
        raise VoiceError(f"chat model: no vLLM environment at {AR_VENV}; run `scripts/setup.sh --chat`")
    if chat_model != EMBEDDED_CHAT:
        if not (Path(chat_model) / "config.json").exists():
            raise VoiceError(f"chat model {chat_model}: not a Hugging Face model directory (no config.json)")
        return chat_model
    run = subprocess.run([str(AR_VENV / "bin" / "python"), "-m", "python_backends.thinker.gguf_model"],
                         cwd=PROJECT_ROOT, capture_output=True, text=True)
    if run.returncode:
        raise VoiceError(f"the embedded chat model could not be made: {run.stderr.strip().splitlines()[-1:]}")
    return run.stdout.strip().splitlines()[-1]
