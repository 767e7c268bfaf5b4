"""Triton shim for `asr`, the recognizer (python_backends.asr.asr_model.AsrModel)."""

import os
import sys

# The stub ignores PYTHONPATH: the launcher names the project here.
sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))
# Each Whisper pass runs on one core (intra_threads=1), passes of different recognizer
# streams side by side; ctranslate2's OpenMP threads would spin beside each, taking cores
# the other passes need (known-limits.md has what it cost). Read when ctranslate2 loads, below.
os.environ["OMP_NUM_THREADS"] = "1"

from python_backends.asr.asr_model import AsrModel as TritonPythonModel  # noqa: E402, F401
