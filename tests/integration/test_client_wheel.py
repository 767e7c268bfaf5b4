"""The client distribution (speechstream/pyproject.toml, docs/client.md): its wheel holds
the one name `speechstream` and nothing of the server's, asks only for the client's
requirements, and works installed into an environment of its own, away from the
repository: here the voice-agent frameworks' (.venv-agents), where it must import beside
them. Building it fetches setuptools from the package index, as any isolated build."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
AGENTS_PYTHON = ROOT / os.environ.get("AGENTS_VENV", ".venv-agents") / "bin" / "python"
SERVER_PACKAGES = ("contract", "gateway", "python_backends", "operations")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of speechstream/ so that no build output lands in the tree."""
    work = tmp_path_factory.mktemp("client-wheel")
    source = shutil.copytree(ROOT / "speechstream", work / "source", ignore=shutil.ignore_patterns("__pycache__"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(work / "dist")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    (built,) = (work / "dist").glob("speechstream_client-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel unpacked by pip into a folder of its own (no dependencies: the agents'
    environment has websockets already)."""
    target = tmp_path_factory.mktemp("client-site")
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return target


def test_the_wheel_holds_only_the_speechstream_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"speechstream"}
    assert "speechstream/client/asyncio_client.py" in names and "speechstream/protocol.py" in names
    assert not [n for n in names if n.endswith("pyproject.toml")]


def test_the_wheel_asks_only_for_the_clients_requirements(wheel):
    with zipfile.ZipFile(wheel) as z:
        (metadata,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [line.split(": ", 1)[1] for line in z.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist: ")]
    always = [r for r in requires if "extra ==" not in r]
    assert [r.split(">")[0].split("<")[0] for r in always] == ["websockets"]
    for server_only in ("tritonclient", "aiohttp", "onnxruntime", "opuslib", "prometheus"):
        assert not [r for r in requires if r.startswith(server_only)], requires


def imports(installed: Path, code: str) -> dict:
    """Runs `code` in the agents' Python with the installed wheel first on its path, from
    a folder outside the repository, and returns the JSON it prints last."""
    program = f"import sys; sys.path.insert(0, {str(installed)!r})\n{code}"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([str(AGENTS_PYTHON), "-c", program], cwd=installed.parent, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_installed_apart_from_the_repository_the_client_imports_and_loads_nothing_of_the_servers(installed):
    got = imports(installed, (
        "import json, speechstream, speechstream.client, speechstream.protocol\n"
        "from speechstream.client import SpeechClient, SyncSpeechClient\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({SERVER_PACKAGES!r}))\n"
        "print(json.dumps({'file': speechstream.client.__file__, 'loaded': loaded,"
        " 'path': speechstream.protocol.PROTOCOL_PATH}))\n"
    ))
    assert got["file"].startswith(str(installed)) and got["loaded"] == []
    assert got["path"] == "/v1/stream"


def test_installed_apart_from_the_repository_the_livekit_plugin_imports_beside_livekit_agents(installed):
    got = imports(installed, (
        "import json, speechstream.livekit\n"
        "from livekit.agents import tts\n"
        "plugin = speechstream.livekit.TTS(sample_rate=16000)\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({SERVER_PACKAGES!r}))\n"
        "print(json.dumps({'file': speechstream.livekit.__file__, 'loaded': loaded,"
        " 'tts': isinstance(plugin, tts.TTS), 'streaming': plugin.capabilities.streaming,"
        " 'rate': plugin.sample_rate}))\n"
    ))
    assert got["file"].startswith(str(installed)) and got["loaded"] == []
    assert got["tts"] and got["streaming"] and got["rate"] == 16000


def test_installed_the_pipecat_service_imports_beside_pipecat_and_loads_nothing_of_the_servers(wheel, installed):
    with zipfile.ZipFile(wheel) as z:
        (metadata,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        extra = [line for line in z.read(metadata).decode().splitlines()
                 if line.startswith("Requires-Dist: pipecat-ai")]
    assert extra and 'extra == "pipecat"' in extra[0]
    got = imports(installed, (
        "import json, pipecat, speechstream.pipecat\n"
        "from speechstream.pipecat import SpeechstreamTTSService\n"
        "from pipecat.services.tts_service import TTSService\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({SERVER_PACKAGES!r}))\n"
        "print(json.dumps({'file': speechstream.pipecat.__file__, 'loaded': loaded,"
        " 'service': issubclass(SpeechstreamTTSService, TTSService), 'pipecat': pipecat.__file__}))\n"
    ))
    assert got["file"].startswith(str(installed)) and got["loaded"] == []
    assert got["service"] and not got["pipecat"].startswith(str(installed))
