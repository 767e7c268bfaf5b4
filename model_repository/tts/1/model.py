"""Triton shim for `tts`, the Piper family's BLS model (python_backends.piper.tts_model.TtsModel)."""

import os
import sys

# The stub ignores PYTHONPATH: the launcher names the project here.
sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

from python_backends.piper.tts_model import TtsModel as TritonPythonModel  # noqa: E402, F401
