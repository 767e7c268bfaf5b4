"""Triton shim for `vocoder`, the Piper family's Code2Wav
(python_backends.piper.vocoder_model.VocoderModel)."""

import os
import sys

# The stub ignores PYTHONPATH: the launcher names the project here.
sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

from python_backends.piper.vocoder_model import VocoderModel as TritonPythonModel  # noqa: E402, F401
