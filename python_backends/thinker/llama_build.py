"""Whether llama.cpp can serve a chat model on this host: scripts/setup.sh compiles it
for the CPU it runs on and stamps the build with the CPU's flags; a build for another
CPU could stop the Thinker's stub with an illegal instruction. No llama.cpp import here
(checking must not load it)."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

STAMP = "built-for-cpu"  # in llama_cpp's package folder: the sha256 of the CPU flags it was built for


def llama_cpp_unusable(directory: Path) -> str | None:
    """Why llama.cpp cannot serve `directory` here, if it cannot: no GGUF there, or
    llama.cpp not built, or built for another CPU (its kernels could stop the stub with
    an illegal instruction; scripts/setup.sh builds it again for this one)."""
    if not any(directory.glob("*.gguf")):
        return f"{directory} holds no GGUF for llama.cpp"
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None:
        return "llama.cpp is not installed (scripts/setup.sh --chat)"
    stamp = Path(spec.submodule_search_locations[0]) / STAMP
    if not stamp.exists() or stamp.read_text().strip() != cpu_flags_hash():
        return "llama.cpp was built for another CPU (run scripts/setup.sh --chat on this host)"
    return None


def cpu_flags_hash() -> str:
    """The sha256 of /proc/cpuinfo's first `flags` line with its newline, as setup.sh hashes it."""
    with open("/proc/cpuinfo") as info:
        line = next(line for line in info if line.startswith("flags"))
    return hashlib.sha256(line.encode()).hexdigest()
