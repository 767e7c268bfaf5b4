"""docker-compose.yml and the Dockerfile, checked statically (no Docker engine here):
they parse, wire the services as the README says, and copy files that exist."""

import re
from pathlib import Path

import yaml

from python_backends import contract as c
from python_backends.catalog import VOICES_ENV

ROOT = Path(__file__).parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
GPU = yaml.safe_load((ROOT / "docker-compose.gpu.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()
README = (ROOT / "README.md").read_text()


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


def test_both_services_serve_the_same_voices_directory():
    for service in COMPOSE["services"].values():
        assert service["environment"][VOICES_ENV] == "/voices"
        assert service["volumes"] == ["./voices:/voices:ro"]


def test_each_service_builds_a_stage_that_exists():
    for name, service in COMPOSE["services"].items():
        assert service["build"] == {"context": ".", "target": name}
        stage(name)


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
    assert len(copies) == 7
    for sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), source


def test_the_gpu_override_reserves_an_nvidia_gpu_for_triton():
    devices = GPU["services"]["triton"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert "docker compose" in README and c.PROTOCOL_PATH in README
