"""The import contracts in pyproject.toml ([tool.importlinter]) hold, and they bite: a
pure module that imports onnxruntime or Triton's client, or a package that imports one
of another process's, breaks them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([*LINT, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_are_kept():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "BROKEN" not in result.stdout


PACKAGES = ("speechstream", "contract", "python_backends", "gateway", "operations")


@pytest.mark.parametrize("module,line", [
    ("python_backends/chunking.py", "import onnxruntime"),
    ("gateway/protocols/session.py", "import tritonclient.grpc.aio"),
    ("gateway/messages.py", "from gateway.protocols import session"),  # a layer importing one above it
    ("gateway/backends/servers.py", "from gateway.edge import service"),  # the backends under the edge
    ("gateway/conversation/chatting.py", "from gateway.conversation import speaking"),  # the modes in layers
    ("gateway/conversation/speaking.py", "import asyncio"),  # the conversation is sans I/O
    ("gateway/protocols/runners.py", "import tritonclient.grpc.aio"),  # only the backends talk to Triton
    ("contract/models.py", "import aiohttp"),  # the contract is pure
    ("contract/text.py", "from gateway import messages"),  # and imports no process's package
    ("gateway/edge/service.py", "from python_backends import chunking"),  # the gateway runs no stage code
    ("speechstream/client/events.py", "from gateway import messages"),  # the client is apart from the gateway
    ("speechstream/client/resume.py", "import websockets"),  # the client's core is sans I/O
    ("speechstream/client/asyncio_client.py", "from contract import models"),  # what users install is apart from the server
    ("speechstream/protocol.py", "import websockets"),  # protocol v1's vocabulary is pure
    ("operations/environment.py", "from operations import supervisor"),  # operations in layers
    ("python_backends/failover.py", "import tritonclient"),  # a pure stage module
    ("python_backends/piper/pipeline.py", "from python_backends.ar import connector"),  # sibling families
    ("python_backends/delivery.py", "from python_backends.piper import pipeline"),  # common code under families
])
def test_a_wrong_import_breaks_a_contract(tmp_path, module, line):
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    source = tmp_path / module
    source.write_text(source.read_text() + f"\n{line}\n")
    result = lint(tmp_path)
    assert result.returncode != 0 and "BROKEN" in result.stdout, result.stdout[-3000:]


def test_the_tts_models_process_loads_no_engine():
    """The tts model only sends requests to the other two, so its process loads no
    onnxruntime (model_repository/ is outside the import contracts' packages). Triton's
    pb_utils exists only inside the Python backend's stub, so it is stubbed here."""
    code = (
        "import sys, importlib.util, unittest.mock\n"
        "sys.modules['triton_python_backend_utils'] = unittest.mock.MagicMock()\n"
        "spec = importlib.util.spec_from_file_location('tts_model', 'model_repository/tts/1/model.py')\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "assert 'onnxruntime' not in sys.modules and 'onnx' not in sys.modules, 'an engine was loaded'\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
