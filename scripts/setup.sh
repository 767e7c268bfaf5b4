#!/usr/bin/env bash
# Install what the server needs on Debian/Ubuntu (with --tests, what the tests need too):
# system libraries, then a virtual environment (.venv, or $SPEECHSTREAM_VENV) with the
# project. Safe to re-run; it skips what is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${SPEECHSTREAM_VENV:-.venv}
PYVER=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

# libpythonX.Y: Triton's Python backend stub links it. libb64-0d: perf_analyzer links it.
# libopus0: opuslib loads it. pythonX.Y-venv: Debian's python3 has no venv module without it.
packages=("libpython$PYVER" libb64-0d libopus0)
"$PYTHON" -c 'import ensurepip' 2>/dev/null || packages+=("python$PYVER-venv")
# chromium: the browser test drives Debian's build (no browser download).
[ "${1:-}" = "--tests" ] && packages+=(chromium)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

extras="[serve]"; [ "${1:-}" = "--tests" ] && extras="[test]"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
stamp="$VENV/.speechstream-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)$extras"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the project into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e ".$extras"
  echo "$want" > "$stamp"
fi

# Locust in an environment of its own (see perf/locust-requirements.txt).
if [ "${1:-}" = "--tests" ]; then
  LOCUST_VENV=${LOCUST_VENV:-.venv-locust}
  [ -x "$LOCUST_VENV/bin/python" ] || "$PYTHON" -m venv "$LOCUST_VENV"
  want=$(sha256sum perf/locust-requirements.txt | cut -d' ' -f1)
  if [ "$(cat "$LOCUST_VENV/.installed" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing Locust into $LOCUST_VENV" >&2
    "$LOCUST_VENV/bin/python" -m pip install -q -r perf/locust-requirements.txt
    echo "$want" > "$LOCUST_VENV/.installed"
  fi

  # LiveKit Agents' and Pipecat's OpenAI TTS clients, in an environment of their own
  # (see tests/agents-requirements.txt).
  AGENTS_VENV=${AGENTS_VENV:-.venv-agents}
  [ -x "$AGENTS_VENV/bin/python" ] || "$PYTHON" -m venv "$AGENTS_VENV"
  want=$(sha256sum tests/agents-requirements.txt | cut -d' ' -f1)
  if [ "$(cat "$AGENTS_VENV/.installed" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing LiveKit Agents and Pipecat into $AGENTS_VENV" >&2
    "$AGENTS_VENV/bin/python" -m pip install -q -r tests/agents-requirements.txt
    echo "$want" > "$AGENTS_VENV/.installed"
  fi
fi
