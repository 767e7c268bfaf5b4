"""Triton shim for `tts`, the Piper family's BLS model (python_backends.piper.bls.TtsModel)."""

import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))  # the stub ignores PYTHONPATH

from python_backends.piper.bls import TtsModel as TritonPythonModel  # noqa: E402, F401
