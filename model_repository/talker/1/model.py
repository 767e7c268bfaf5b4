"""Triton shim for `talker`, the autoregressive family's Talker
(python_backends.ar.talker_model.TalkerModel)."""

import locale
import os
import sys

# The stub ignores PYTHONPATH: the launcher names the project and the AR environment here.
sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_AR_PYTHONPATH", "").split(os.pathsep))
# vLLM runs its child processes (model inspection, at import; the engine) with
# sys.executable, which is the PATH's python in the stub: make it the AR environment's.
sys.executable = os.environ["SPEECHSTREAM_AR_PYTHON"]

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")  # the stub starts with an ASCII locale; torch reads UTF-8 files

from python_backends.ar.talker_model import TalkerModel as TritonPythonModel  # noqa: E402, F401
