"""Triton shim for `thinker`, the voice chat's chat model
(python_backends.thinker.thinker_model.ThinkerModel)."""

import locale
import os
import sys

# The stub ignores PYTHONPATH: the launcher names the project and the vLLM environment here.
sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_AR_PYTHONPATH", "").split(os.pathsep))
# vLLM runs its child processes with sys.executable, the PATH's python in the stub: make it the vLLM environment's.
sys.executable = os.environ["SPEECHSTREAM_AR_PYTHON"]

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")  # the stub starts with an ASCII locale; torch reads UTF-8 files

from python_backends.thinker.thinker_model import ThinkerModel as TritonPythonModel  # noqa: E402, F401
