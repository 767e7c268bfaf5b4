"""Triton shim for `acoustic`, the Piper family's Talker
(python_backends.piper.acoustic_model.AcousticModel)."""

import os
import sys

# The stub ignores PYTHONPATH: the launcher names the project here.
sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_PYTHONPATH", "").split(os.pathsep))

from python_backends.piper.acoustic_model import AcousticModel as TritonPythonModel  # noqa: E402, F401
