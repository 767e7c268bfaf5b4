"""Triton shim for `tts_ar`, the autoregressive family's BLS model
(python_backends.ar.bls.TtsArModel)."""

import os
import sys

sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))  # the stub ignores PYTHONPATH

from python_backends.ar.bls import TtsArModel as TritonPythonModel  # noqa: E402, F401
