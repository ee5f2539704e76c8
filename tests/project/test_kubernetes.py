"""deploy/kubernetes/: the Kustomize base and the example overlay, rendered by `kubectl kustomize`
and every object validated against the Kubernetes schemas (kubernetes-validate, whose wheel
ships them: nothing is downloaded), then checked against what the image and the settings
really do: the same image and commands as the Dockerfile and compose, only variables that
settings.py reads, probes that answer 200 for the configured hosts, secrets by reference,
non-root pods with read-only roots, and memory requests no smaller than the measured RSS."""

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.conf import settings
from django.test import override_settings

from tests.project.test_compose import (
    NON_SETTINGS_ENV,
    WORKERS,
    _asgi_get,
    _celery_command,
    _dockerfile_instructions,
    _exec_form,
    _server_app,
    _services,
    _settings_env_names,
)

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
TREES = {"base": KUBE / "base", "example": KUBE / "overlays" / "example"}
# The oldest Kubernetes release the manifests must be valid for (autoscaling/v2, policy/v1 PDBs,
# networking.k8s.io/v1 Ingress are all GA well before it).
KUBERNETES_VERSION = "1.30"
DEPLOYMENTS = {
    "prompt-registry-web": "web",
    "prompt-registry-worker-lifecycle": "worker-lifecycle",
    "prompt-registry-worker-deliveries": "worker-deliveries",
    "prompt-registry-beat": "beat",
}
# Read by a library rather than by settings.py: prometheus_client's multiprocess directory.
LIBRARY_ENV = {"PROMETHEUS_MULTIPROC_DIR"}
SECRET_ENV = {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}
PHASE = "prompt-registry/phase"  # the label of what the runbook applies before the rollout

pytestmark = pytest.mark.skipif(not shutil.which("kubectl"), reason="needs kubectl (kubectl kustomize)")


@cache
def _rendered(tree: str) -> tuple[dict[str, Any], ...]:
    done = subprocess.run(
        ["kubectl", "kustomize", str(TREES[tree])], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def _objects(tree: str, kind: str) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in _rendered(tree) if obj["kind"] == kind}


def _pod_specs(tree: str) -> dict[str, dict[str, Any]]:
    specs = {name: obj["spec"]["template"]["spec"] for name, obj in _objects(tree, "Deployment").items()}
    specs |= {name: obj["spec"]["template"]["spec"] for name, obj in _objects(tree, "Job").items()}
    return specs


def _container(tree: str, name: str) -> dict[str, Any]:
    (container,) = _pod_specs(tree)[name]["containers"]
    return container


def _mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)(Mi|Gi)", quantity).groups()
    return float(number) * (1024 if unit == "Gi" else 1)


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_rendered_object_is_valid_against_the_kubernetes_schemas(tree):
    objects = _rendered(tree)
    assert len(objects) >= 11
    for obj in objects:
        # strict: an unknown field (a typo, or one in the wrong place) is an error, not ignored.
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_validator_refuses_a_broken_object():
    """So that the test above can fail: a misplaced field and a wrong type are caught."""
    web = _objects("base", "Deployment")["prompt-registry-web"]
    broken = {**web, "spec": {**web["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
    broken = {**web, "spec": {**web["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("tree", sorted(TREES))
def test_it_has_every_part_of_a_production_deploy(tree):
    kinds = {(obj["kind"], obj["metadata"]["name"]) for obj in _rendered(tree)}
    assert {("Deployment", name) for name in DEPLOYMENTS} <= kinds
    assert {
        ("Job", "prompt-registry-migrate"),
        ("Service", "prompt-registry-web"),
        ("Ingress", "prompt-registry"),
        ("PodDisruptionBudget", "prompt-registry-web"),
        ("HorizontalPodAutoscaler", "prompt-registry-web"),
        ("ConfigMap", "prompt-registry"),
        ("ServiceAccount", "prompt-registry"),
    } <= kinds
    # Secrets by reference: none is rendered, PostgreSQL and Redis are outside (by URL).
    assert not any(kind in ("Secret", "StatefulSet") for kind, _ in kinds)


@pytest.mark.parametrize("tree", sorted(TREES))
def test_exactly_one_beat_replaced_by_recreate_and_never_autoscaled(tree):
    beat = _objects(tree, "Deployment")["prompt-registry-beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    targets = {hpa["spec"]["scaleTargetRef"]["name"] for hpa in _objects(tree, "HorizontalPodAutoscaler").values()}
    assert targets == {"prompt-registry-web"}


@pytest.mark.parametrize("tree", sorted(TREES))
def test_the_service_ingress_budget_and_autoscaler_point_at_the_web_pods(tree):
    web = _objects(tree, "Deployment")["prompt-registry-web"]
    labels = web["spec"]["template"]["metadata"]["labels"]
    service = _objects(tree, "Service")["prompt-registry-web"]
    assert service["spec"]["selector"].items() <= labels.items()
    # ...and at no other pods: the component label tells them apart.
    for name, other in _objects(tree, "Deployment").items():
        if name != "prompt-registry-web":
            assert not service["spec"]["selector"].items() <= other["spec"]["template"]["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    (container_port,) = _container(tree, "prompt-registry-web")["ports"]
    assert port["targetPort"] == container_port["name"]
    ingress = _objects(tree, "Ingress")["prompt-registry"]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "prompt-registry-web", "port": {"name": port["name"]}}
    assert ingress["spec"]["tls"][0]["hosts"] == [ingress["spec"]["rules"][0]["host"]]
    # The body cap is the app's (2 MiB), as in deploy/nginx.conf.
    body = ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"]
    assert int(body.rstrip("m")) * 1024 * 1024 == settings.MAX_REQUEST_BODY_BYTES
    pdb = _objects(tree, "PodDisruptionBudget")["prompt-registry-web"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items() and pdb["spec"]["minAvailable"] == 1
    hpa = _objects(tree, "HorizontalPodAutoscaler")["prompt-registry-web"]
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": web["metadata"]["name"]}
    assert hpa["spec"]["scaleTargetRef"] == target
    assert hpa["spec"]["minReplicas"] >= pdb["spec"]["minAvailable"] + 1, "a drain must leave one pod serving"
    assert "replicas" not in web["spec"], "the autoscaler owns web's replica count (apply would reset it)"
    # The allowed host includes the Ingress's (Django refuses any other Host).
    allowed = _objects(tree, "ConfigMap")["prompt-registry"]["data"]["DJANGO_ALLOWED_HOSTS"].split(",")
    assert ingress["spec"]["rules"][0]["host"] in allowed


@pytest.mark.parametrize("tree", sorted(TREES))
def test_only_the_ingress_controller_reaches_the_web_pods_and_metrics_need_the_token(tree):
    # Issue 36: any pod could reach web directly (forging X-Forwarded-For), and /metrics had no token.
    web = _objects(tree, "Deployment")["prompt-registry-web"]
    labels = web["spec"]["template"]["metadata"]["labels"]
    policy = _objects(tree, "NetworkPolicy")["prompt-registry-web"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    (container_port,) = _container(tree, "prompt-registry-web")["ports"]
    assert rule["ports"] == [{"protocol": "TCP", "port": container_port["name"]}]
    controller, monitoring = rule["from"]
    assert controller == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    assert monitoring == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ingress = _objects(tree, "Ingress")["prompt-registry"]
    assert ingress["spec"]["ingressClassName"] == "nginx"
    token = _env(_container(tree, "prompt-registry-web"))["METRICS_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": "prompt-registry", "key": "METRICS_TOKEN"}
    config = _objects(tree, "ConfigMap")["prompt-registry"]["data"]
    assert config["DJANGO_TRUSTED_PROXIES"] and int(config["DJANGO_TRUSTED_PROXY_HOPS"]) == 1


@pytest.mark.parametrize("tree", sorted(TREES))
def test_only_the_audit_prune_cronjob_holds_the_pruners_database_url(tree):
    # Issue 36: the audit prune's exception is a database role whose URL no Deployment reads.
    for name, spec in _pod_specs(tree).items():
        (container,) = spec["containers"]
        assert "AUDIT_PRUNE_DATABASE_URL" not in _env(container), name
    job = _objects(tree, "CronJob")["prompt-registry-audit-prune"]
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    spec = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"] == ["python", "manage.py", "prune"]
    assert container["image"] == _container(tree, "prompt-registry-web")["image"]
    env = _env(container)
    ref = env["AUDIT_PRUNE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "prompt-registry-audit-prune", "key": "AUDIT_PRUNE_DATABASE_URL"}
    assert spec["securityContext"]["runAsNonRoot"] and container["securityContext"]["readOnlyRootFilesystem"]
    read, _ = _settings_env_names()
    assert set(env) <= read


def test_every_container_runs_the_image_and_the_commands_compose_and_the_dockerfile_run():
    (cmd,) = [args for op, args in _dockerfile_instructions() if op == "CMD"]
    compose = _services()
    assert compose["web"]["image"] == "prompt-registry:latest"
    for tree in TREES:
        expected_image = "prompt-registry:latest" if tree == "base" else "registry.example.com/prompt-registry:1.0.0"
        for name, spec in _pod_specs(tree).items():
            for container in spec["containers"]:
                assert container["image"] == expected_image, (tree, name)
        assert _container(tree, "prompt-registry-web")["command"] == _exec_form(cmd)
        assert _container(tree, "prompt-registry-migrate")["command"] == compose["migrate"]["command"]
        assert _container(tree, "prompt-registry-beat")["command"] == compose["beat"]["command"]
        for service, queue in WORKERS.items():
            command = _container(tree, f"prompt-registry-{service}")["command"]
            assert command == compose[service]["command"], service
            _, subcommand, options = _celery_command(command)
            assert subcommand == "worker" and options["queues"] == [queue]


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container.get("env", [])}


@pytest.mark.parametrize("tree", sorted(TREES))
def test_the_environment_is_what_settings_read_with_secrets_by_reference(tree):
    read, required = _settings_env_names()
    assert required == SECRET_ENV, "settings.py's required variables changed: update the manifests"
    config = _objects(tree, "ConfigMap")["prompt-registry"]["data"]
    assert set(config) <= read and {"DJANGO_ALLOWED_HOSTS", "DJANGO_BEHIND_PROXY"} <= set(config)
    instructions = _dockerfile_instructions()
    prometheus_dir = next(args for op, args in instructions if args.startswith("PROMETHEUS_MULTIPROC_DIR"))
    for name, spec in _pod_specs(tree).items():
        (container,) = spec["containers"]
        env = _env(container)
        assert set(env) - NON_SETTINGS_ENV - LIBRARY_ENV <= read, (name, set(env) - read)
        assert container["envFrom"] == [{"configMapRef": {"name": "prompt-registry"}}]
        for secret in SECRET_ENV:
            assert "value" not in env[secret], f"{name}: {secret} must come from the Secret"
            assert env[secret]["valueFrom"]["secretKeyRef"] == {"name": "prompt-registry", "key": secret}
        if "PROMETHEUS_MULTIPROC_DIR" in env:
            assert env["PROMETHEUS_MULTIPROC_DIR"]["value"] == prometheus_dir.split("=", 1)[1]


@pytest.mark.django_db
@pytest.mark.parametrize("tree", sorted(TREES))
def test_the_probes_answer_200_on_the_port_the_server_binds_for_the_configured_hosts(tree):
    web = _container(tree, "prompt-registry-web")
    parsed, application = _server_app(web["command"])
    (port,) = web["ports"]
    assert port["containerPort"] == parsed.port
    allowed = _objects(tree, "ConfigMap")["prompt-registry"]["data"]["DJANGO_ALLOWED_HOSTS"].split(",")
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = web[kind]["httpGet"]
        assert probe["port"] == port["name"]
        (header,) = probe["httpHeaders"]
        assert header["name"] == "Host" and header["value"] in allowed
        with override_settings(ALLOWED_HOSTS=allowed):
            status, body = _asgi_get(application, f"http://10.0.0.7:{parsed.port}{probe['path']}", header["value"])
        assert status == "200", (kind, status, body)
    # Plain HTTP inside the cluster: the probes are exempt from the HTTPS redirect.
    assert {"^healthz$", "^readyz$"} <= set(settings.SECURE_REDIRECT_EXEMPT)
    for service in WORKERS:
        probe = _container(tree, f"prompt-registry-{service}")["livenessProbe"]["exec"]["command"]
        _, subcommand, _ = _celery_command(probe[-1].replace("$HOSTNAME", "host").split())
        assert subcommand == "inspect"


def _user_id() -> int:
    (user,) = [args for op, args in _dockerfile_instructions() if op == "USER"]
    return int(user.split(":")[0])


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_pod_is_non_root_with_a_read_only_root_and_writes_only_to_empty_dirs(tree):
    for name, spec in _pod_specs(tree).items():
        assert spec["automountServiceAccountToken"] is False
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == _user_id(), name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        empty_dirs = {volume["name"] for volume in spec["volumes"] if "emptyDir" in volume}
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
            assert mounts.get("/tmp") in empty_dirs, f"{name}: /tmp must be writable"
            env = _env(container)
            # Where the process writes: the Prometheus directory and beat's schedule file.
            writes = [env[n]["value"] for n in LIBRARY_ENV if n in env]
            if "--schedule" in container["command"]:
                writes.append(str(Path(container["command"][container["command"].index("--schedule") + 1]).parent))
            for path in writes:
                assert mounts.get(path) in empty_dirs or path.startswith("/tmp"), (name, path)
                assert mounts.get(path) in empty_dirs, (name, path)  # its own, fresh per pod


def _measured_rss() -> dict[str, float]:
    """The benchmark's RSS figures in docs/performance.md (MB)."""
    text = (ROOT / "docs" / "performance.md").read_text()
    web = re.search(r"web workers (\d+) and (\d+) MB \(the server process (\d+) MB\)", text)
    celery = re.search(r"Celery\s+(\d+) MB plus (\d+) and (\d+) MB for its pool", text)
    assert web and celery, "docs/performance.md's RSS sentence changed: update this test"
    return {
        "web_worker": max(float(web.group(1)), float(web.group(2))),
        "web_server": float(web.group(3)),
        "celery_main": float(celery.group(1)),
        "celery_pool": max(float(celery.group(2)), float(celery.group(3))),
    }


@pytest.mark.parametrize("tree", sorted(TREES))
def test_memory_requests_cover_the_measured_rss_and_every_container_requests_cpu(tree):
    rss = _measured_rss()
    mb = 1000 * 1000 / (1024 * 1024)  # MB -> MiB
    for name, spec in _pod_specs(tree).items():
        (container,) = spec["containers"]
        resources = container["resources"]
        assert resources["requests"]["cpu"], name
        request, limit = _mebibytes(resources["requests"]["memory"]), _mebibytes(resources["limits"]["memory"])
        assert request <= limit, name
        command = container["command"]
        if name == "prompt-registry-web":
            workers = int(_env(container)["WEB_CONCURRENCY"]["value"])
            needed = workers * rss["web_worker"] + rss["web_server"]
        elif "worker" in command:
            _, _, options = _celery_command(command)
            needed = rss["celery_main"] + options["concurrency"] * rss["celery_pool"]
        elif "beat" in command:
            needed = rss["celery_main"]
        else:  # the migration: one Django process, no server
            needed = rss["web_worker"]
        assert request >= needed * mb, f"{name}: {request} MiB requested, {needed:.0f} MB measured"
        assert request <= 2 * needed * mb, f"{name}: {request} MiB requested is far above the {needed:.0f} MB measured"


def test_the_migration_job_runs_once_before_the_rollout_as_the_runbook_says():
    job = _objects("example", "Job")["prompt-registry-migrate"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 1
    # The runbook applies the Job and what it needs by a label, then the rest: the label picks
    # no workload, and everything the Job's pod refers to.
    phase = [obj for obj in _rendered("example") if obj["metadata"].get("labels", {}).get(PHASE) == "pre-rollout"]
    assert sorted(obj["kind"] for obj in phase) == ["ConfigMap", "Job", "Namespace", "ServiceAccount"]
    operations = (ROOT / "docs" / "operations.md").read_text()
    section = operations.split("## Deployment on Kubernetes", 1)[1].split("\n## ", 1)[0]
    steps = [
        "kubectl kustomize deploy/kubernetes/overlays/example > registry.yaml",
        "kubectl -n prompt-registry delete job prompt-registry-migrate --ignore-not-found",
        f"kubectl apply -f registry.yaml -l {PHASE}=pre-rollout",
        "kubectl -n prompt-registry wait --for=condition=complete job/prompt-registry-migrate",
        "kubectl apply -f registry.yaml\n",
    ]
    positions = [section.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), list(zip(steps, positions, strict=True))
    namespace = _objects("example", "Namespace")
    assert list(namespace) == ["prompt-registry"]
    assert "Helm" in section
