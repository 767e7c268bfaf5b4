"""Triton shim for `tts_ar`, the autoregressive family's BLS model
(python_backends.ar.tts_ar_model.TtsArModel)."""

import os
import sys

# The stub ignores PYTHONPATH: the launcher names the project here.
sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

from python_backends.ar.tts_ar_model import TtsArModel as TritonPythonModel  # noqa: E402, F401
