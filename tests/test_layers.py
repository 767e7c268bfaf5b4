"""python_backends' layers point one way: pure modules (numpy at most) at the bottom, the
onnxruntime engines above them, the Triton-facing modules on top. The forbidden imports
are import-linter contracts (tests/test_architecture.py); these tests add what those do
not say: pure modules use nothing but the standard library and numpy, engines nothing of
Triton, and the tts model's process loads no onnxruntime."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PURE = {"contract", "text", "timing", "chunking", "requests", "scheduler", "streaming"}
ENGINES = {"phonemes", "voice", "engines"}
TRITON = {"triton_glue", "bls"}
HEAVY = ("onnxruntime", "onnx", "tritonclient", "triton_python_backend_utils")


def imports(module: str) -> set[str]:
    """What python_backends/`module`.py imports: sibling modules by their bare name,
    others by their top-level package; lazy imports inside functions included."""
    found = set()
    for node in ast.walk(ast.parse((ROOT / "python_backends" / f"{module}.py").read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            found |= {node.module} if node.module else {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module.split(".")[0])
    return found


def test_every_module_has_a_layer():
    modules = {p.stem for p in (ROOT / "python_backends").glob("*.py")} - {"__init__"}
    assert modules - PURE - ENGINES - TRITON == {"launcher", "triton_client"}  # programs beside the layers


@pytest.mark.parametrize("module", sorted(PURE))
def test_pure_modules_import_the_standard_library_numpy_and_each_other_only(module):
    outside = imports(module) - PURE - set(sys.stdlib_module_names) - {"numpy"}
    assert not outside, outside


@pytest.mark.parametrize("module", sorted(ENGINES))
def test_engines_import_nothing_of_triton(module):
    assert not imports(module) & (TRITON | {"tritonclient", "triton_python_backend_utils"})


def run(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_importing_the_pure_modules_loads_no_engine_or_triton_library():
    run(f"import sys, {', '.join(f'python_backends.{m}' for m in sorted(PURE))}\n"
        f"assert not [m for m in {HEAVY!r} if m in sys.modules], sorted(sys.modules)")


def test_the_tts_model_loads_no_onnxruntime():
    """The tts model only sends requests to the others: its process needs no engine."""
    run("import sys, importlib.util, unittest.mock\n"
        "sys.modules['triton_python_backend_utils'] = unittest.mock.MagicMock()\n"
        "spec = importlib.util.spec_from_file_location('tts_model', 'model_repository/tts/1/model.py')\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "assert 'onnxruntime' not in sys.modules and 'onnx' not in sys.modules")
