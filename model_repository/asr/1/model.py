"""Triton shim for `asr`, the recognizer (python_backends.asr.asr_model.AsrModel)."""

import os
import sys

# The stub ignores PYTHONPATH: the launcher names the project here.
sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

from python_backends.asr.asr_model import AsrModel as TritonPythonModel  # noqa: E402, F401
