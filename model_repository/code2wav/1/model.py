"""Triton shim for `code2wav`, the autoregressive family's Code2Wav
(python_backends.ar.code2wav_model.Code2WavModel)."""

import locale
import os
import sys

# The stub ignores PYTHONPATH: the launcher names the project and the AR environment here.
sys.path[:0] = filter(None, os.environ.get("SPEECHSTREAM_AR_PYTHONPATH", "").split(os.pathsep))

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")  # the stub starts with an ASCII locale; torch reads UTF-8 files

from python_backends.ar.code2wav_model import Code2WavModel as TritonPythonModel  # noqa: E402, F401
