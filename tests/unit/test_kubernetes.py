"""deploy/kubernetes: the base and the example overlay, rendered and validated offline.

The overlay is rendered by a real kustomize (`kubectl kustomize`, which embeds it) in a copy of
deploy/ where the credential files are the committed examples; every rendered object is validated
against the Kubernetes API's own JSON schemas (`kubernetes-validate`, strict: unknown fields fail)
for the newest Kubernetes version it ships and the oldest one cardflow supports. KEDA's
ScaledObjects are checked against the fields KEDA documents for its `redis-streams` scaler, and
against cardflow's own stream and group names.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from typer.main import get_command

from services.cli.main import app
from services.cli.service import SERVICES
from shared import names
from shared.pg_roles import role_name
from shared.redis_acl import GATE_USER, service_user

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"
OVERLAY = KUBERNETES / "overlays" / "tianyi-example"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
KUBERNETES_VERSIONS = [kubernetes_validate.latest_version(), "1.29.0"]
"""The newest schemas the validator ships, and the oldest Kubernetes cardflow's manifests target."""

CONSUMED: dict[str, tuple[str, str]] = {
    "intake": (names.INGEST_STREAM, names.INTAKE_GROUP),
    "readiness": (names.routed_stream(names.READINESS_GROUP), names.READINESS_GROUP),
    "matcher": (names.routed_stream(names.MATCHER_GROUP), names.MATCHER_GROUP),
    "ledger": (names.EVENTS_STREAM, names.LEDGER_GROUP),
    "views": (names.EVENTS_STREAM, names.CONSOLE_GROUP),
    "dispatcher": (names.EVENTS_STREAM, names.DISPATCHER_GROUP),
}
"""Each service's consumed stream and consumer group (what a lag scaler must watch)."""
NOT_SCALED_ON_LAG = {"dispatcher", "views", "config", "gate"}  # gate: one instance forwards (its lock), more would wait
"""One leader plus a standby; one projector (deploy/kubernetes/base/scaling.yaml says why); the config service consumes no stream."""

# The `redis-streams` trigger as KEDA documents it (keda.sh/docs/2.x/scalers/redis-streams): the
# metadata keys it reads, lag-based scaling with its activation threshold.
REDIS_STREAMS_TRIGGER = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type", "metadata"],
    "properties": {
        "type": {"const": "redis-streams"},
        "authenticationRef": {"type": "object", "required": ["name"]},
        "metadata": {
            "type": "object",
            "additionalProperties": False,
            "required": ["stream", "consumerGroup", "lagCount", "activationLagCount"],
            "properties": {
                key: {"type": "string"}
                for key in (
                    "address", "host", "port", "addressFromEnv", "hostFromEnv", "portFromEnv", "usernameFromEnv",
                    "passwordFromEnv", "stream", "consumerGroup", "pendingEntriesCount", "streamLength", "lagCount",
                    "activationLagCount", "enableTLS", "unsafeSsl", "databaseIndex",
                )
            },
        },
    },
}
SCALED_OBJECT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object", "additionalProperties": False, "required": ["name"],
                    "properties": {"name": {"type": "string"}, "kind": {"type": "string"}, "apiVersion": {"type": "string"}},
                },
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "triggers": {"type": "array", "minItems": 1, "items": REDIS_STREAMS_TRIGGER},
            },
        },
    },
}


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def render(overlay: Path, workdir: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize` of `overlay` in a copy of deploy/kubernetes whose credentials are the examples."""
    copy = workdir / "kubernetes"
    shutil.copytree(KUBERNETES, copy)
    target = copy / overlay.relative_to(KUBERNETES)
    for example in target.glob("*.env.example"):
        shutil.copy(example, target / example.name.removesuffix(".example"))
    result = subprocess.run(
        ["kubectl", "kustomize", str(target)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl (its embedded kustomize renders the overlay) is not on PATH")
    return render(OVERLAY, tmp_path_factory.mktemp("kustomize"))


def by_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] == kind}


def workloads(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] in {"Deployment", "DaemonSet"}}


def containers(documents: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, workload in workloads(documents).items():
        for container in workload["spec"]["template"]["spec"]["containers"]:
            yield name, container


def base_documents() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    return [doc for resource in kustomization["resources"] for doc in load_documents(BASE / resource)]


def kubernetes_objects(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for doc in documents if not doc["apiVersion"].startswith("keda.sh/")]


# ---- schema validation -----------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_base_object_is_valid_for_kubernetes(version: str) -> None:
    documents = kubernetes_objects(base_documents())

    assert documents
    for doc in documents:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_object_of_the_overlay_is_valid_for_kubernetes(rendered: list[dict[str, Any]], version: str) -> None:
    for doc in kubernetes_objects(rendered):
        kubernetes_validate.validate(doc, version, strict=True)


def test_a_schema_violation_is_caught() -> None:
    """The validator is strict: a misspelt field fails (so the tests above can fail)."""
    deployment = next(doc for doc in base_documents() if doc["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["envfrom"] = []

    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


def test_scaled_objects_use_only_documented_keda_fields(rendered: list[dict[str, Any]]) -> None:
    scaled = by_kind(rendered, "ScaledObject")

    assert scaled
    for doc in scaled.values():
        jsonschema.validate(doc, SCALED_OBJECT)


# ---- what runs --------------------------------------------------------------------------------


def test_every_service_and_the_console_run_as_a_deployment(rendered: list[dict[str, Any]]) -> None:
    deployments = by_kind(rendered, "Deployment")
    commands = {name: d["spec"]["template"]["spec"]["containers"][0]["command"] for name, d in deployments.items()}

    for service in SERVICES:
        assert commands.get(f"cardflow-{service}") == ["cardflow", "service", service]
    assert commands["cardflow-console"][:2] == ["cardflow", "console"]
    registered = set(get_command(app).commands)  # type: ignore[attr-defined]
    assert {command[1] for command in commands.values()} <= registered


def test_the_agent_is_a_daemonset_on_gpu_nodes_in_real_mode(rendered: list[dict[str, Any]]) -> None:
    agent = by_kind(rendered, "DaemonSet")["cardflow-agent"]
    pod = agent["spec"]["template"]["spec"]
    container = pod["containers"][0]
    command = container["command"]
    env = {item["name"]: item for item in container["env"]}

    assert command[:3] == ["cardflow", "agent", "--real"]
    assert "--sim" not in command
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert any(key.startswith("nvidia.com/") for key in pod["nodeSelector"])
    assert command[command.index("--id") + 1] == "$(NODE_NAME)"  # one agent id (and inbox) per node
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    agent_options = {
        option for param in get_command(app).commands["agent"].params for option in param.opts  # type: ignore[attr-defined]
    }
    assert {arg for arg in command if arg.startswith("--")} <= agent_options


def test_agents_get_their_own_credentials_without_database_or_storage_secrets(rendered: list[dict[str, Any]]) -> None:
    agent = by_kind(rendered, "DaemonSet")["cardflow-agent"]["spec"]["template"]["spec"]["containers"][0]
    secret_names = [source["secretRef"]["name"] for source in agent["envFrom"] if "secretRef" in source]
    secrets = by_kind(rendered, "Secret")

    assert len(secret_names) == 1
    assert set(secrets[secret_names[0]]["data"]) == {"CARDFLOW_REDIS_URL"}


def test_the_dispatcher_is_leader_locked_with_a_standby_and_never_scaled_on_lag(rendered: list[dict[str, Any]]) -> None:
    dispatcher = by_kind(rendered, "Deployment")["cardflow-dispatcher"]
    budget = by_kind(rendered, "PodDisruptionBudget")["cardflow-dispatcher"]
    scaled_targets = {doc["spec"]["scaleTargetRef"]["name"] for doc in by_kind(rendered, "ScaledObject").values()}

    assert dispatcher["spec"]["replicas"] == 2  # the leader lock keeps one active
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == dispatcher["spec"]["selector"]["matchLabels"]
    assert "cardflow-dispatcher" not in scaled_targets


def test_consumer_services_scale_on_the_lag_of_their_own_stream_and_group(rendered: list[dict[str, Any]]) -> None:
    scaled = {doc["spec"]["scaleTargetRef"]["name"]: doc for doc in by_kind(rendered, "ScaledObject").values()}
    deployments = by_kind(rendered, "Deployment")

    expected = {f"cardflow-{service}" for service in SERVICES if service not in NOT_SCALED_ON_LAG}
    assert set(scaled) == expected
    for target, doc in scaled.items():
        trigger = doc["spec"]["triggers"][0]["metadata"]
        assert (trigger["stream"], trigger["consumerGroup"]) == CONSUMED[target.removeprefix("cardflow-")]
        assert 1 <= doc["spec"]["minReplicaCount"] <= doc["spec"]["maxReplicaCount"]
        assert target in deployments
        env = environment_of(rendered, deployments[target])
        assert {trigger["addressFromEnv"], trigger["passwordFromEnv"]} <= set(env)


def environment_of(documents: list[dict[str, Any]], workload: dict[str, Any]) -> dict[str, str]:
    """The variables a workload's first container gets, each with where it comes from: "ConfigMap" or
    "Secret" (envFrom, or one key of it), "value" (written in the manifest, perhaps built from others)."""
    container = workload["spec"]["template"]["spec"]["containers"][0]
    keys: dict[str, str] = {}
    for source in container.get("envFrom", []):
        kind, ref = ("ConfigMap", source["configMapRef"]) if "configMapRef" in source else ("Secret", source["secretRef"])
        keys.update({key: kind for key in by_kind(documents, kind)[ref["name"]]["data"]})
    for item in container.get("env", []):
        source = item.get("valueFrom", {})
        keys[item["name"]] = "Secret" if "secretKeyRef" in source else "ConfigMap" if "configMapKeyRef" in source else "value"
    return keys


# ---- settings, secrets, images -----------------------------------------------------------------


def test_every_referenced_configmap_secret_and_claim_exists(rendered: list[dict[str, Any]]) -> None:
    for name, workload in workloads(rendered).items():
        pod = workload["spec"]["template"]["spec"]
        for container in pod["containers"]:
            for source in container.get("envFrom", []):
                kind, ref = next(iter(source.items()))
                assert ref["name"] in by_kind(rendered, "ConfigMap" if kind == "configMapRef" else "Secret"), name
        for volume in pod.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in by_kind(rendered, "PersistentVolumeClaim")


def test_services_and_the_console_get_every_backend_setting(rendered: list[dict[str, Any]]) -> None:
    required = {
        "CARDFLOW_REDIS_URL": "value", "CARDFLOW_DATABASE_URL": "value", "CARDFLOW_S3_ACCESS_KEY": "Secret",
        "CARDFLOW_S3_SECRET_KEY": "Secret", "CARDFLOW_S3_ENDPOINT": "ConfigMap", "CARDFLOW_S3_REGION": "ConfigMap",
        "CARDFLOW_S3_ADDRESSING_STYLE": "ConfigMap",
    }
    for name, deployment in by_kind(rendered, "Deployment").items():
        env = environment_of(rendered, deployment)
        assert {key: env.get(key) for key in required} == required, name
    settings = by_kind(rendered, "ConfigMap")["cardflow-settings"]["data"]
    assert settings["CARDFLOW_S3_ADDRESSING_STYLE"] == "path"


def test_no_secret_is_committed_in_the_base_or_a_configmap() -> None:
    base = base_documents()
    settings = (OVERLAY / "settings.env").read_text()

    assert [doc["metadata"]["name"] for doc in base if doc["kind"] == "Secret"] == []
    for doc in base:
        if doc["kind"] == "ConfigMap":
            assert not [key for key in doc["data"] if re.search("PASSWORD|SECRET|ACCESS_KEY|_URL$", key)]
    assert not re.search(r"PASSWORD|SECRET|ACCESS_KEY|://[^/\s]*:[^/\s]*@", settings)
    ignored = (OVERLAY / ".gitignore").read_text().split()
    assert {"credentials-*.env", "object-storage.env", "agent-credentials.env"} <= set(ignored)
    assert not (OVERLAY / "credentials.env.example").exists()  # the one Secret every service shared is gone


def test_each_service_reads_only_its_own_redis_user_and_postgresql_role(rendered: list[dict[str, Any]]) -> None:
    """One Secret per Deployment holding only its own two passwords; its URLs name its own Redis user
    (shared.redis_acl) and PostgreSQL role (shared.pg_roles), and every $(VAR) they use is defined
    before them (Kubernetes expands only those)."""
    secrets = by_kind(rendered, "Secret")
    for service in SERVICES:
        container = by_kind(rendered, "Deployment")[f"cardflow-{service}"]["spec"]["template"]["spec"]["containers"][0]
        env = container["env"]
        referenced = {item["valueFrom"]["secretKeyRef"]["name"] for item in env if "secretKeyRef" in item.get("valueFrom", {})}
        own = next(name for name in secrets if name.startswith(f"cardflow-{service}-credentials"))  # kustomize adds a hash
        assert referenced == {own}, service
        assert set(secrets[own]["data"]) == {"CARDFLOW_REDIS_PASSWORD", "CARDFLOW_POSTGRES_PASSWORD"}, service
        assert [s["secretRef"]["name"] for s in container["envFrom"] if "secretRef" in s] == [
            next(name for name in secrets if name.startswith("cardflow-object-storage"))
        ]
        values = {item["name"]: item.get("value", "") for item in env}
        user = GATE_USER if service == "gate" else service_user(service).name
        assert values["CARDFLOW_REDIS_USERNAME"] == user
        assert "://$(CARDFLOW_REDIS_USERNAME):$(CARDFLOW_REDIS_PASSWORD)@" in values["CARDFLOW_REDIS_URL"]
        assert values["CARDFLOW_DATABASE_URL"].startswith(f"postgresql://{role_name(service)}:$(CARDFLOW_POSTGRES_PASSWORD)@")
        settings = set(by_kind(rendered, "ConfigMap")[container["envFrom"][0]["configMapRef"]["name"]]["data"])
        for position, item in enumerate(env):
            defined = settings | {earlier["name"] for earlier in env[:position]}
            assert set(re.findall(r"\$\(([A-Z0-9_]+)\)", item.get("value", ""))) <= defined, (service, item["name"])


def test_every_image_is_pinned_to_a_version_never_latest(rendered: list[dict[str, Any]]) -> None:
    images = {container["image"] for _, container in containers(rendered)}
    base_images = {container["image"] for _, container in containers(base_documents())}

    assert base_images == {f"cardflow:{VERSION}"}  # the project's version from pyproject.toml
    assert len(images) == 1
    image = images.pop()
    name, _, tag = image.rpartition(":")
    assert "/" in name and "." in name.split("/")[0]  # a registry host, not Docker Hub's library
    assert tag == VERSION


def test_pods_run_as_non_root_without_a_service_account_token(rendered: list[dict[str, Any]]) -> None:
    for name, workload in workloads(rendered).items():
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["automountServiceAccountToken"] is False, name
        for container in pod["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name


def test_the_console_is_published_through_its_service(rendered: list[dict[str, Any]]) -> None:
    service = by_kind(rendered, "Service")["cardflow-console"]
    console = by_kind(rendered, "Deployment")["cardflow-console"]
    ingress = by_kind(rendered, "Ingress")["cardflow-console"]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]

    assert service["spec"]["selector"] == console["spec"]["selector"]["matchLabels"]
    assert backend["name"] == "cardflow-console"
    assert backend["port"]["name"] in {port["name"] for port in service["spec"]["ports"]}
    assert console["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/healthz"


def test_every_service_and_the_console_are_scraped_on_their_metrics_port(rendered: list[dict[str, Any]]) -> None:
    settings = by_kind(rendered, "ConfigMap")["cardflow-settings"]["data"]
    for name, deployment in by_kind(rendered, "Deployment").items():
        template = deployment["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        ports = {port["containerPort"] for port in template["spec"]["containers"][0]["ports"]}
        expected = 8080 if name == "cardflow-console" else int(settings["CARDFLOW_METRICS_PORT"])

        assert annotations["prometheus.io/scrape"] == "true", name
        assert int(annotations["prometheus.io/port"]) == expected and expected in ports, name
        assert annotations["prometheus.io/path"] == "/metrics", name
    assert settings["CARDFLOW_TRACING"] == "off"  # tracing is opt-in
