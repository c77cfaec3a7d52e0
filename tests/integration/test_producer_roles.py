"""What producers may send and how long what they get back lives, on real worker processes.

With signing on, a worker (started like ``ragline up`` does, with the worker's key) runs a task only
when the certificate that signed it names a role allowed to send it (``names.PRODUCER_ROLES``): a
chat backend's key asks questions but its ingest, ACL and Celery canvas tasks are refused, with a
failed result, a log line and a metric, and the worker keeps serving. Unsigned messages and
certificates without a role are refused too.

Results stay in Redis ``RAGLINE_OPS_RESULT_EXPIRES_S`` at most, and the client deletes one as soon as it
has read it.

Producers run in subprocesses: ``setup_security`` changes kombu's global serializer registry, which
must not leak into this test process (other tests send plain JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragline.shared.sdk.names import TASK_ACL_SYNC, TASK_INGEST_DOCUMENT, TASK_QUERY_ASK, TASK_QUERY_RETRIEVE
from tests.certs import self_signed
from tests.pools import start_pool, wait_log, wait_ready

pytestmark = pytest.mark.slow

ROLES = ("chat", "relay", "operator", "worker")

PRODUCER = """
import json, sys, time
sends = json.loads(sys.argv[1])
out = []
for s in sends:
    t0 = time.monotonic()
    if s.get("via") == "client":
        from ragline.shared.sdk.client import RaglineClient
        client = RaglineClient(timeout=s["wait"])
        try:
            res = client._call(s["task"], s["payload"], s["wait"], queue=s["queue"])
            out.append({"result": res, "s": time.monotonic() - t0})
        except Exception as exc:
            out.append({"error": type(exc).__name__, "detail": str(exc), "s": time.monotonic() - t0})
        continue
    from ragline.shared.worker.celery_app import app
    r = app.send_task(s["task"], args=s["args"], queue=s["queue"])
    try:
        out.append({"id": r.id, "result": r.get(timeout=s["wait"]), "s": time.monotonic() - t0})
    except Exception as exc:
        out.append({"id": r.id, "error": type(exc).__name__, "detail": str(exc), "s": time.monotonic() - t0})
print(json.dumps(out))
"""


def make_keys(folder: Path, extra: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """A key per role (CN ``ragline-<role>``) plus ``extra`` common names, every certificate in one
    store, keys outside it: the environment each producer runs with."""
    store = folder / "certs"
    store.mkdir(parents=True, exist_ok=True)
    keys = folder / "keys"
    keys.mkdir(exist_ok=True)
    out = {}
    for cn in (*(f"ragline-{r}" for r in ROLES), *extra):
        key, cert = self_signed(store, cn)
        key = key.rename(keys / key.name)
        out[cn.removeprefix("ragline-")] = {
            "RAGLINE_OPS_SIGNING_KEY_FILE": str(key),
            "RAGLINE_OPS_SIGNING_CERT_FILE": str(cert),
            "RAGLINE_OPS_SIGNING_CERT_STORE": str(store),
        }
    return out


def produce(env: dict, sends: list[dict], timeout: float = 180, script: str = PRODUCER) -> list[dict]:
    """Run ``script`` (:data:`PRODUCER` by default) with ``sends`` in a producer process whose only
    signing settings are ``env``'s; its JSON answer."""
    from ragline.shared.config.settings import get_settings
    from ragline.shared.stack.processes import child_env

    full = {**child_env(get_settings()), **env}
    for name in (
        "RAGLINE_OPS_SIGNING_KEY_FILE",
        "RAGLINE_OPS_SIGNING_CERT_FILE",
        "RAGLINE_OPS_SIGNING_CERT_STORE",
    ):
        if name not in env:
            full.pop(name, None)
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(sends)],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def send(task: str, payload: object, queue: str, wait: float = 60, via: str = "app") -> dict:
    args = payload if task.startswith("celery.") else [payload]
    return {"task": task, "args": args, "payload": payload, "queue": queue, "wait": wait, "via": via}


def refused_lines(log: str) -> list[dict]:
    out = []
    for line in log.splitlines():
        if '"task refused"' in line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def refused_metric(settings, pool: str) -> dict[tuple[str, str, str], float]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from ragline.shared.worker.metrics_server import metrics_dir, registry_for

    text = generate_latest(registry_for(metrics_dir(settings, pool))).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rag_tasks_refused_total":
                out[(sample.labels["task"], sample.labels["role"], sample.labels["reason"])] = sample.value
    return out


def test_each_role_sends_only_its_tasks_and_the_worker_stays_up(stack, tmp_path, tenant, conn):
    from ragline.shared.worker import credentials
    from ragline.shared.worker.metrics_server import metrics_dir, reset_dir

    keys = make_keys(tmp_path, extra=("someone",))
    reset_dir(metrics_dir(stack, "query"))
    worker = start_pool(stack, "query", env={**keys["worker"], "RAGLINE_WORKERS_WARMUP": "false"})
    try:
        wait_log(worker, " ready.")  # pings are unsigned JSON: a signed worker refuses them
        q = worker.queue
        question = {"query": "подпись", "tenant": tenant, "groups": ["g"], "mode": "lexical"}
        document = {
            "tenant": tenant,
            "doc_id": "refused.md",
            "fmt": "md",
            "content": "# Отказ\n\nЭтот документ не должен попасть в индекс.\n",
            "acl": ["g"],
        }
        acl = {"items": [{"tenant": tenant, "doc_id": "refused.md", "acl": ["everyone"], "version": 1}]}

        chat = produce(
            keys["chat"],
            [
                send(TASK_QUERY_RETRIEVE, question, q),
                send(TASK_INGEST_DOCUMENT, document, q),
                send(TASK_ACL_SYNC, acl, q),
                send("celery.group", [[], None, None], q),  # a canvas task would send others as the worker
                send(TASK_QUERY_ASK, {**question, "k": 3}, q, via="client"),
                send(TASK_ACL_SYNC, acl, q, via="client"),
            ],
        )
        ok, ingest, sync, group, client_ask, client_sync = chat
        assert ok.get("result", {}).get("hits") == [], ok
        for refused, task in ((ingest, TASK_INGEST_DOCUMENT), (sync, TASK_ACL_SYNC), (group, "celery.group")):
            assert refused.get("error") == "SecurityError", refused
            assert f"'chat' may not send {task}" in refused["detail"], refused
            assert refused["s"] < 30, refused  # a failed result at once, not a timeout
        assert "answer" in client_ask.get("result", {}), client_ask  # the client signs with its key
        assert client_sync.get("error") == "SecurityError", client_sync

        relay = produce(
            keys["relay"],
            [send(TASK_ACL_SYNC, {**acl, "missing": "report"}, q), send(TASK_QUERY_RETRIEVE, question, q)],
        )
        assert relay[0].get("result", {}).get("items") == 1, relay[0]
        assert relay[1].get("error") == "SecurityError" and "'relay' may not send" in relay[1]["detail"]

        operator = produce(keys["operator"], [send(TASK_INGEST_DOCUMENT, {"tenant": tenant}, q)])
        assert operator[0].get("result", {}).get("error") == "invalid payload", operator  # it ran

        nobody = produce(keys["someone"], [send(TASK_QUERY_RETRIEVE, question, q)])
        assert nobody[0].get("error") == "SecurityError" and "'none' may not send" in nobody[0]["detail"]

        unsigned = produce({}, [send(TASK_QUERY_RETRIEVE, question, q, wait=4)])
        assert unsigned[0].get("error") == "TimeoutError", unsigned  # Celery drops it (ContentDisallowed)

        again = produce(keys["chat"], [send(TASK_QUERY_RETRIEVE, question, q)])
        assert again[0].get("result", {}).get("hits") == [], again
        assert worker.proc.poll() is None  # refusing messages never stops the worker

        stored = conn.execute(
            "SELECT count(*) AS n FROM documents WHERE tenant = %s AND doc_id = 'refused.md'", (tenant,)
        ).fetchone()
        assert stored["n"] == 0  # the refused ingest never ran (and the relay's sync only reported it)

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(refused_lines(worker.log_text())) < 6:
            time.sleep(0.2)
        log = worker.log_text()
        lines = {(r["task"], r["role"]) for r in refused_lines(log)}
        assert lines == {
            (TASK_INGEST_DOCUMENT, "chat"),
            (TASK_ACL_SYNC, "chat"),
            ("celery.group", "chat"),
            (TASK_QUERY_RETRIEVE, "relay"),
            (TASK_QUERY_RETRIEVE, "none"),
        }, lines
        assert "ContentDisallowed" in log  # the unsigned message, refused by Celery itself
        counted = refused_metric(stack, "query")
        assert counted[(TASK_ACL_SYNC, "chat", "role")] == 2  # the raw send and the client's
        assert counted[(TASK_INGEST_DOCUMENT, "chat", "role")] == 1
        assert counted[("celery.group", "chat", "role")] == 1
        assert counted[(TASK_QUERY_RETRIEVE, "relay", "role")] == 1
        assert counted[(TASK_QUERY_RETRIEVE, "none", "role")] == 1
        assert counted[(TASK_QUERY_RETRIEVE, "none", "unsigned")] == 1
        redis_password = credentials.password(stack, "redis")
        assert redis_password not in log  # the broker URL is masked in the worker's banner and logs
    finally:
        worker.stop()


def test_results_expire_by_the_setting_and_the_client_forgets_what_it_read(stack, tenant):
    import redis

    from ragline.shared.sdk.client import RaglineClient, RaglineError
    from ragline.shared.worker.celery_app import app

    worker = start_pool(
        stack, "query", env={"RAGLINE_OPS_RESULT_EXPIRES_S": "45", "RAGLINE_WORKERS_WARMUP": "false"}
    )
    r = redis.Redis.from_url(stack.effective_redis_url())
    try:
        wait_ready(app, worker)
        question = {"query": "результат", "tenant": tenant, "groups": ["g"], "mode": "lexical"}
        res = app.send_task(TASK_QUERY_RETRIEVE, args=[question], queue=worker.queue)
        assert res.get(timeout=60)["hits"] == []
        ttl = r.ttl(f"celery-task-meta-{res.id}")
        assert 0 < ttl <= 45, ttl  # was a day

        client = RaglineClient(stack.effective_redis_url(), timeout=60)
        sent = []
        send_task = client.app.send_task
        client.app.send_task = lambda *a, **kw: sent.append(send_task(*a, **kw)) or sent[-1]
        assert client._call(TASK_QUERY_RETRIEVE, question, 60, queue=worker.queue)["hits"] == []
        with pytest.raises(RaglineError):  # a structured error is a result read too
            client._call(TASK_QUERY_RETRIEVE, {**question, "k": 0}, 60, queue=worker.queue)
        assert len(sent) == 2
        assert [r.exists(f"celery-task-meta-{s.id}") for s in sent] == [0, 0]
        assert r.exists(f"celery-task-meta-{res.id}") == 1  # what nobody forgot stays until it expires
    finally:
        r.close()
        worker.stop()
