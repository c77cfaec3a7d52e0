"""deploy/: the compose file is valid for the docker CLI, the Kubernetes manifests validate against the
offline schemas of kubernetes-validate, and both keep the operational rules (one beat, probes,
localhost-only published ports, a scaler per pool on its queue)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S_VERSION = "1.33.0"


def _compose_cmd() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.fixture(scope="module")
def compose_config(tmp_path_factory) -> dict:
    cmd = _compose_cmd()
    if cmd is None:
        pytest.skip("no docker compose CLI on this machine")
    env_file = tmp_path_factory.mktemp("compose") / ".env"
    env_file.write_text((DEPLOY / ".env.example").read_text())
    out = subprocess.run(
        [*cmd, "--env-file", str(env_file), "-f", str(DEPLOY / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
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
    assert "FLOWER_BASIC_AUTH" in services["flower"]["environment"]


def test_compose_publishes_ports_on_localhost_only(compose_config):
    for name, svc in compose_config["services"].items():
        for port in svc.get("ports", []):
            text = port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port.get('published')}"
            assert text.startswith("127.0.0.1:"), (name, port)


def test_compose_refuses_to_start_without_passwords():
    cmd = _compose_cmd()
    if cmd is None:
        pytest.skip("no docker compose CLI on this machine")
    out = subprocess.run(
        [*cmd, "-f", str(DEPLOY / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin"},
        cwd="/",
    )
    assert out.returncode != 0 and "PASSWORD" in (out.stderr + out.stdout)


def test_prometheus_scrapes_every_pool_with_auth():
    conf = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
    ports = {j["dns_sd_configs"][0]["port"] for j in jobs.values()}
    assert ports == {9540, 9541, 9542}
    assert all(j["basic_auth"]["username"] == "metrics" for j in jobs.values())


def _manifests() -> list[tuple[str, dict]]:
    return [
        (f.name, doc)
        for f in sorted((DEPLOY / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(f.read_text())
        if doc
    ]


def test_k8s_manifests_validate_against_schemas():
    import kubernetes_validate

    core = [(n, d) for n, d in _manifests() if not d["apiVersion"].startswith("keda.sh/")]
    assert len(core) >= 10
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


def test_keda_scales_each_pool_on_its_queue_length():
    import jsonschema

    from ragline.shared.names import POOLS

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


def test_every_launcher_starts_workers_through_ragline_worker(monkeypatch):
    """`ragline up`, the container entrypoint, compose and Kubernetes run one worker command line:
    the one ``ragline worker POOL`` builds. Nothing in deploy/ overrides what it decides."""
    import json
    import os
    import sys

    from ragline.shared.names import POOLS
    from ragline.shared.processes import specs, worker_command
    from ragline.shared.settings import Settings

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
        k for k in config if k.endswith("_CONCURRENCY") or k in ("OMP_NUM_THREADS", "RAGLINE_QUERY_POOL")
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
