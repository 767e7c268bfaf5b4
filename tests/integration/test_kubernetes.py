"""The Kubernetes manifests (deploy/kubernetes), offline: no API server runs here, so
nothing is applied. Each overlay is rendered with `kubectl kustomize` and validated
strictly (unknown fields rejected) against Kubernetes 1.32's schemas with
kubernetes-validate. KEDA's ScaledObject and prometheus-operator's PodMonitor and
PrometheusRule are validated against minimal schemas written by hand from their
documented fields (deploy/kubernetes/schemas), since their published CRD schemas cannot
be downloaded here. Then what matters is checked on the rendered objects, and the
Prometheus rules are unit-tested with promtool (Debian's `prometheus` package)."""

import json
import os
import re
import shutil
import subprocess
from dataclasses import fields
from functools import cache
from importlib.resources import files
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from referencing import Registry, Resource

from contract import models as c
from contract.voices import AR_MODEL_ENV, VOICES_ENV
from gateway.backends.servers import Backends
from gateway.edge.metrics import Metrics
from gateway.settings import Settings

KUBERNETES = "1.32.0"  # kubectl's on the development machines
ROOT = Path(__file__).parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("cpu", "gpu", "ar")
GPU_OVERLAYS = ("gpu", "ar")
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()
MARGIN_S = 5  # what a grace period keeps beyond the waits it covers
COREDNS_TTL_S = 5  # the kubernetes plugin's default ttl

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize built in) is not installed")


def kustomize(path: Path) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, check=True).stdout
    return [o for o in yaml.safe_load_all(out) if o]


@cache
def _rendered(overlay: str) -> str:
    return json.dumps(kustomize(MANIFESTS / "overlays" / overlay))


def rendered(overlay: str) -> list[dict]:
    """A fresh copy of the overlay's objects (rendered once)."""
    return json.loads(_rendered(overlay))


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def container(workload: dict) -> dict:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    return only


def env(cont: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in cont.get("env", [])}


def grace_s(workload: dict) -> int:
    return workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]


def pre_stop_s(cont: dict) -> int:
    return cont["lifecycle"]["preStop"]["sleep"]["seconds"]


# Validation

K8S_DEFINITIONS = files("kubernetes_validate") / "kubernetes-json-schema" / f"v{KUBERNETES}-local-strict" / "_definitions.json"
CRD_SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-keda-v1alpha1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-monitoring-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring-v1.json",
}


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    """Our hand-written schema of a custom resource; it refers to Kubernetes' own
    definitions (ObjectMeta, LabelSelector, the HPA's behavior) by their $id."""
    schema = json.loads((MANIFESTS / "schemas" / CRD_SCHEMAS[api_version, kind]).read_text())
    registry = Resource.from_contents(json.loads(K8S_DEFINITIONS.read_text())) @ Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validation_errors(obj: dict) -> list[str]:
    """Why `obj` is invalid (nothing when it is valid); a kind with no schema is an error."""
    where = f"{obj['kind']}/{obj['metadata']['name']}"
    if (obj["apiVersion"], obj["kind"]) in CRD_SCHEMAS:
        validator = crd_validator(obj["apiVersion"], obj["kind"])
        return [f"{where}: {'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(obj)]
    try:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{where}: {'.'.join(map(str, e.path))}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"{where}: {e.message}"]
    return []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_strictly(overlay):
    objects = rendered(overlay)
    assert {o["kind"] for o in objects} >= {
        "Namespace", "Deployment", "Service", "Ingress", "PodDisruptionBudget",
        "ScaledObject", "PodMonitor", "PrometheusRule",
    }
    assert [e for o in objects for e in validation_errors(o)] == []


def test_validation_rejects_a_misspelt_field_in_built_in_and_custom_resources():
    objects = rendered("cpu")
    gateway, scaled = one(objects, "Deployment", "gateway"), one(objects, "ScaledObject")
    container(gateway)["readinessProbes"] = container(gateway).pop("readinessProbe")
    scaled["spec"]["maxReplicas"] = scaled["spec"].pop("maxReplicaCount")
    scaled["spec"]["triggers"][0]["metadata"].pop("query")
    errors = validation_errors(gateway) + validation_errors(scaled)
    assert any("readinessProbes" in e for e in errors), errors
    assert any("maxReplicas" in e for e in errors), errors
    assert any("'query' is a required property" in e for e in errors), errors


# What the objects say


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_triton_is_behind_a_headless_service_the_gateway_resolves(overlay):
    objects = rendered(overlay)
    triton, service = one(objects, "Deployment", "triton"), one(objects, "Service", "triton-headless")
    assert service["spec"]["clusterIP"] == "None"  # its name resolves to every ready pod
    assert not service["spec"].get("publishNotReadyAddresses")
    gateway = env(container(one(objects, "Deployment", "gateway")))
    assert "triton_service" in {f.name for f in fields(Settings)}
    assert gateway["GATEWAY_TRITON_SERVICE"] == "triton-headless:8001"
    assert "TRITON_GRPC_URL" not in gateway
    pod_labels = triton["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert triton["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = {p["name"]: p["containerPort"] for p in container(triton)["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == ports


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_triton_has_an_in_memory_dev_shm(overlay):
    triton = one(rendered(overlay), "Deployment", "triton")
    (mount,) = [m for m in container(triton)["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in triton["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"
    # docker-compose's shm_size: 1gb for the Piper chain, 4gb where vLLM runs.
    assert volume["emptyDir"]["sizeLimit"] == ("4Gi" if overlay == "ar" else "1Gi")


def http_probe_ports(cont: dict) -> set:
    probes = [cont[k] for k in ("startupProbe", "readinessProbe", "livenessProbe") if k in cont]
    return {p["httpGet"]["port"] for p in probes}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_readiness_and_liveness_probes_on_its_own_ports(overlay):
    objects = rendered(overlay)
    workloads = [o for o in objects if o["kind"] == "Deployment"]
    assert len(workloads) == 2
    for workload in workloads:
        for cont in workload["spec"]["template"]["spec"]["containers"]:
            assert "readinessProbe" in cont and "livenessProbe" in cont, cont["name"]
            assert http_probe_ports(cont) <= {p["name"] for p in cont["ports"]}, cont["name"]
    gateway, triton = container(one(objects, "Deployment", "gateway")), container(one(objects, "Deployment", "triton"))
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"  # 503 while draining
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"


def start_period_s(compose_service: str) -> int:
    return int(COMPOSE["services"][compose_service]["healthcheck"]["start_period"].removesuffix("s"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_triton_s_startup_probe_gives_its_models_the_time_docker_compose_does(overlay):
    probe = container(one(rendered(overlay), "Deployment", "triton"))["startupProbe"]
    budget_s = probe["periodSeconds"] * probe["failureThreshold"]
    assert budget_s >= start_period_s("triton-ar" if overlay == "ar" else "triton")
    if overlay != "ar":
        assert budget_s < start_period_s("triton-ar")  # a hung Piper load is not waited on for 10 minutes


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateway_s_grace_period_covers_its_pre_stop_and_drain(overlay):
    gateway = one(rendered(overlay), "Deployment", "gateway")
    drain_s = float(env(container(gateway)).get("GATEWAY_DRAIN", Settings().drain_s))
    assert grace_s(gateway) >= pre_stop_s(container(gateway)) + drain_s + MARGIN_S


def exit_timeout_s(triton: dict) -> int:
    (flag,) = [a for a in container(triton)["args"] if a.startswith("--exit-timeout-secs=")]
    return int(flag.split("=")[1])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_triton_s_grace_period_covers_its_pre_stop_and_exit_timeout(overlay):
    triton = one(rendered(overlay), "Deployment", "triton")
    gateway_drain_s = float(env(container(one(rendered(overlay), "Deployment", "gateway")))["GATEWAY_DRAIN"])
    assert exit_timeout_s(triton) >= gateway_drain_s  # a stream a gateway waits for is not cut by Triton first
    assert grace_s(triton) >= pre_stop_s(container(triton)) + exit_timeout_s(triton) + MARGIN_S


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_stopping_triton_leaves_the_gateways_before_it_refuses_streams(overlay):
    """preStop outlasts the gateways' next resolution of the Service, through CoreDNS'
    cache (its records' TTL, 5 s by default): SIGTERM comes once no stream is sent there."""
    objects = rendered(overlay)
    resolve_s = float(env(container(one(objects, "Deployment", "gateway"))).get(
        "GATEWAY_RESOLVE_INTERVAL", Settings().resolve_interval_s))
    assert pre_stop_s(container(one(objects, "Deployment", "triton"))) >= resolve_s + COREDNS_TTL_S + MARGIN_S


def image_cmd(target: str) -> list[str]:
    """The JSON CMD of the Dockerfile's stage `target`."""
    body = re.search(rf"^FROM \S+ AS {target}\n(.*?)(?=^FROM |\Z)", DOCKERFILE, re.M | re.S).group(1)
    (cmd,) = re.findall(r"^CMD (\[.*?\])$", body.replace("\\\n", ""), re.M | re.S)
    return json.loads(cmd)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_docker_compose_s_and_triton_runs_its_image_s_command(overlay):
    objects = rendered(overlay)
    service = "triton-ar" if overlay == "ar" else "triton"
    triton, gateway = container(one(objects, "Deployment", "triton")), container(one(objects, "Deployment", "gateway"))
    assert triton["image"] == COMPOSE["services"][service]["image"]
    assert gateway["image"] == COMPOSE["services"]["gateway"]["image"]
    # args, not command: NVIDIA's entrypoint still runs.
    assert "command" not in triton
    assert triton["args"] == image_cmd(COMPOSE["services"][service]["build"]["target"]) + [
        f"--exit-timeout-secs={exit_timeout_s(one(objects, 'Deployment', 'triton'))}"
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gpu_overlays_put_triton_on_a_gpu_and_the_cpu_one_does_not(overlay):
    triton = one(rendered(overlay), "Deployment", "triton")
    limits = container(triton)["resources"]["limits"]
    tolerations = triton["spec"]["template"]["spec"].get("tolerations", [])
    if overlay in GPU_OVERLAYS:
        assert limits["nvidia.com/gpu"] == 1
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    else:
        assert "nvidia.com/gpu" not in limits and not tolerations


def test_the_ar_overlay_mounts_the_model_read_only_and_tells_the_gateway():
    objects = rendered("ar")
    triton = one(objects, "Deployment", "triton")
    (mount,) = [m for m in container(triton)["volumeMounts"] if m["mountPath"] == "/ar-model"]
    assert mount["readOnly"]
    (volume,) = [v for v in triton["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["persistentVolumeClaim"]["readOnly"]
    assert "ENV SPEECHSTREAM_AR_MODEL=/ar-model" in DOCKERFILE  # where the triton-ar image looks
    assert env(container(one(objects, "Deployment", "gateway")))[AR_MODEL_ENV] == "/ar-model"
    assert AR_MODEL_ENV not in env(container(one(rendered("cpu"), "Deployment", "gateway")))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_autoscaler_scales_triton(overlay):
    objects = rendered(overlay)
    assert "replicas" not in one(objects, "Deployment", "triton")["spec"]  # kubectl apply would undo the autoscaler
    spec = one(objects, "ScaledObject", "triton")["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton"}
    assert 2 <= spec["minReplicaCount"] < spec["maxReplicaCount"]
    down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] >= 300 and down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 300}]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_disruption_budgets_leave_each_workload_serving(overlay):
    objects = rendered(overlay)
    scaled = one(objects, "ScaledObject", "triton")
    for name in ("gateway", "triton"):
        workload, budget = one(objects, "Deployment", name), one(objects, "PodDisruptionBudget", name)
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
        least = scaled["spec"]["minReplicaCount"] if name == "triton" else workload["spec"]["replicas"]
        assert least - budget["spec"]["maxUnavailable"] >= 1


def test_the_ingress_outwaits_an_idle_websocket():
    ingress = one(rendered("cpu"), "Ingress", "gateway")
    annotations = ingress["metadata"]["annotations"]
    for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
        assert int(annotations[f"nginx.ingress.kubernetes.io/{timeout}"]) > Settings().idle_timeout_s
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"  # streamed speech bodies
    (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
    assert path["backend"]["service"] == {"name": "gateway", "port": {"name": "http"}}


def test_the_voices_component_gives_both_the_same_read_only_directory(tmp_path):
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        # kustomize takes relative paths only
        "resources": [os.path.relpath(MANIFESTS / "overlays" / "cpu", tmp_path)],
        "components": [os.path.relpath(MANIFESTS / "components" / "voices", tmp_path)],
    }))
    objects = kustomize(tmp_path)
    assert [e for o in objects for e in validation_errors(o)] == []
    for workload in (one(objects, "Deployment", "gateway"), one(objects, "Deployment", "triton")):
        cont = container(workload)
        (mount,) = [m for m in cont["volumeMounts"] if m["mountPath"] == "/voices"]
        assert mount["readOnly"] and env(cont)[VOICES_ENV] == "/voices"
        (volume,) = [v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
        assert volume["persistentVolumeClaim"] == {"claimName": "speechstream-voices", "readOnly": True}


# Metrics, rules and the autoscaler's queries


def exported_metrics() -> set[str]:
    """The series names the gateway's /metrics and Triton's metrics port can carry."""
    names = set()
    for family in Metrics(lambda: 0, lambda: 0, lambda: 0, Backends(())).registry.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}.get(family.type, [""])
        names |= {family.name + s for s in suffixes}
    return names | {v for k, v in vars(c).items() if k.endswith("_METRIC")}


def rules(objects: list[dict]) -> list[dict]:
    return [r for g in one(objects, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]


def queries(objects: list[dict]) -> list[str]:
    return [t["metadata"]["query"] for t in one(objects, "ScaledObject", "triton")["spec"]["triggers"]]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rules_and_queries_read_only_metrics_that_exist(overlay):
    objects = rendered(overlay)
    recorded = {r["record"] for r in rules(objects) if "record" in r}
    exported = exported_metrics()
    for expr in [r["expr"] for r in rules(objects)] + queries(objects):
        for name in re.findall(r"\b(?:speechstream_\w+|\w+:speechstream\w*:\w+)\b", expr):
            assert name in exported | recorded, f"{name} in {expr}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_autoscaler_reads_utilisation_and_refusals_of_its_own_namespace(overlay):
    objects = rendered(overlay)
    namespace = one(objects, "Namespace")["metadata"]["name"]
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] != "Namespace"} == {namespace}
    found = queries(objects)
    assert any("namespace:speechstream_triton_demand:servers" in q for q in found)
    assert any("namespace:speechstream_refused:rate2m" in q for q in found)
    for query in found:
        assert re.findall(r'namespace="([^"]*)"', query) == [namespace], query
    if overlay == "ar":
        assert any(c.TALKER_WAITING_METRIC in q for q in found)


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian's prometheus; scripts/setup.sh --tests)")
def test_promtool_checks_the_rules_and_passes_their_unit_tests(tmp_path):
    """The PrometheusRule's spec as a plain rules file, beside rules-test.yaml, which
    names it: each recording rule's value, and each alert firing and not."""
    spec = one(kustomize(MANIFESTS / "base"), "PrometheusRule")["spec"]
    (tmp_path / "speechstream.rules.yaml").write_text(yaml.safe_dump(spec))
    shutil.copy(MANIFESTS / "rules-test.yaml", tmp_path)
    for command in (["check", "rules", "speechstream.rules.yaml"], ["test", "rules", "rules-test.yaml"]):
        done = subprocess.run([PROMTOOL, *command], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    tested = yaml.safe_load((MANIFESTS / "rules-test.yaml").read_text())["tests"]
    alerts_tested = {t["alertname"] for test in tested for t in test.get("alert_rule_test", []) if t["exp_alerts"]}
    assert alerts_tested == {r["alert"] for g in spec["groups"] for r in g["rules"] if "alert" in r}
