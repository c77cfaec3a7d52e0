"""The decode gate against every pool: results in bench/results/chaos.json (section ``decode_gate``).

Signed and unsigned stacks × every pool (ingest, query, control) × every kind of message a producer's
Redis user or signing key can put on its queue: pickle, YAML and msgpack bodies, a body signed by
the role allowed to send the task whose inner content type is pickle (Celery's ``auth`` serializer
decodes it with ``force=True`` upstream), 16 bytes of garbage, JSON that is no kombu envelope, an
envelope whose body is not base64, a JSON body that is no task body, and a task whose payload fails
validation, and JSON nested deeper than the recursion limit. Each pickle (outer and inner) would
create a marker directory if it were ever unpickled.

Every pool must drop each bad message (logged, counted in ``rag_tasks_refused`` by reason, gone from
its queue and from the ``unacked`` hash, so it never comes back), never create the marker, stay up,
and then run the last message: a task whose payload fails validation, answered with a recorded error.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import time
import uuid
from pathlib import Path

import pytest
import redis

from ragline.shared.sdk.names import TASK_ACL_SYNC, TASK_INGEST_DOCUMENT, TASK_QUERY_RETRIEVE
from tests.chaos import harness
from tests.integration.test_producer_roles import make_keys, refused_metric
from tests.pools import start_pool, wait_log

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

#: each pool, the task it runs and the role allowed to sign that task
POOLS = {
    "ingest": (TASK_INGEST_DOCUMENT, "operator"),
    "query": (TASK_QUERY_RETRIEVE, "chat"),
    "control": (TASK_ACL_SYNC, "relay"),
}
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


class _Mkdir:
    """Unpickled, creates ``path`` (the proof that a pickle ran)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def _signer(env: dict[str, str]):
    """A function signing an inner body with ``env``'s key, as Celery's ``auth`` serializer packs it
    (nothing registered in this process's kombu registry)."""
    from celery.security.certificate import Certificate
    from celery.security.key import PrivateKey
    from celery.security.serialization import SecureSerializer
    from celery.security.utils import get_digest_algorithm

    key = PrivateKey(Path(env["RAGLINE_OPS_SIGNING_KEY_FILE"]).read_text())
    cert = Certificate(Path(env["RAGLINE_OPS_SIGNING_CERT_FILE"]).read_text())
    digest = get_digest_algorithm("sha256")

    def sign(inner: bytes, content_type: str, encoding: str) -> bytes:
        packed = SecureSerializer()._pack(
            inner, content_type, encoding, signer=cert.get_id(), signature=key.sign(inner, digest)
        )
        return packed if isinstance(packed, bytes) else packed.encode()

    return sign


def _envelope(queue: str, task: str, body: bytes, content_type: str, encoding: str, task_id: str) -> str:
    """A kombu Redis-transport message as ``send_task`` would push it (protocol 2 headers)."""
    headers = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "root_id": task_id,
        "parent_id": None,
        "group": None,
        "retries": 0,
        "timelimit": [None, None],
        "eta": None,
        "expires": None,
        "argsrepr": "()",
        "kwargsrepr": "{}",
        "origin": "chaos",
        "ignore_result": False,
    }
    props = {
        "correlation_id": task_id,
        "reply_to": "",
        "delivery_mode": 2,
        "delivery_info": {"exchange": queue, "routing_key": queue},
        "priority": 0,
        "body_encoding": "base64",
        "delivery_tag": str(uuid.uuid4()),
    }
    return json.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "content-encoding": encoding,
            "content-type": content_type,
            "headers": headers,
            "properties": props,
        }
    )


def _cases(queue: str, task: str, marker: Path, sign) -> list[tuple[str, str | bytes, str | None]]:
    """(case, what is pushed, the reason it is counted under or None for the task that runs)."""
    signed = sign is not None
    refused_outer = "unsigned" if signed else "content_type"

    def message(body: bytes, content_type: str, encoding: str = "utf-8", inner: str | None = None) -> str:
        if signed and inner is not None:
            body, content_type, encoding = sign(body, inner, encoding), "application/data", "utf-8"
        elif inner is not None:  # the same signed-looking body on a stack that verifies nothing
            body, content_type = (
                base64.b64encode(b"\x00\x01".join([b"x", b"y", inner.encode(), b"binary", body])),
                ("application/data"),
            )
        return _envelope(queue, task, body, content_type, encoding, f"chaos-{uuid.uuid4()}")

    pickled = pickle.dumps(((_Mkdir(marker),), {}, EMBED), protocol=2)
    bad_payload = json.dumps([[{"not": "a payload"}], {}, EMBED]).encode()
    json_type = "application/json"
    return [
        ("pickle body", message(pickled, "application/x-python-serialize", "binary"), refused_outer),
        (
            "yaml body",
            message(f"!!python/object/apply:os.mkdir ['{marker}']".encode(), "application/x-yaml"),
            refused_outer,
        ),
        ("msgpack body", message(b"\x93\x90\x80\xc0", "application/x-msgpack", "binary"), refused_outer),
        (
            "signed body, inner pickle",
            message(pickled, "", "binary", inner="application/x-python-serialize"),
            "content_type",
        ),
        ("16 bytes of garbage", os.urandom(15) + b"\xff", "not_json"),
        ("JSON that is no envelope", json.dumps(["not", "a", "message"]), "envelope"),
        ("JSON nested 100,000 deep", "[" * 100_000, "not_json"),
        (
            "envelope whose body is not base64",
            json.loads(message(b"x", json_type)) | {"body": "%%%not base64%%%"},
            "envelope",
        ),
        (
            "JSON body that is no task body",
            message(b'["args", "not kwargs"]', json_type, inner=json_type if signed else None),
            "invalid",
        ),
        (
            "payload that fails validation",
            message(bad_payload, json_type, inner=json_type if signed else None),
            None,
        ),
    ]


def _push(client: redis.Redis, queue: str, item) -> None:
    client.lpush(queue, json.dumps(item) if isinstance(item, dict) else item)


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
@pytest.mark.parametrize("pool", list(POOLS))
def test_every_pool_drops_what_is_not_json_and_keeps_consuming(stack, tmp_path, pool, signed):
    row = drops_every_bad_message(stack, tmp_path, pool, signed)
    harness.record(f"decode_gate_{pool}_{'signed' if signed else 'unsigned'}", [row])


def drops_every_bad_message(stack, tmp_path: Path, pool: str, signed: bool) -> harness.FaultResult:
    """One cell of the matrix (the module docstring), asserted; its row of the results table."""
    from ragline.shared.worker.metrics_server import metrics_dir, reset_dir

    task, role = POOLS[pool]
    keys = make_keys(tmp_path) if signed else None
    env = {"RAGLINE_WORKERS_WARMUP": "false", **(keys["worker"] if keys else {})}
    marker = tmp_path / "pickle-ran"
    reset_dir(metrics_dir(stack, pool))
    worker = start_pool(stack, pool, env=env)
    admin = redis.Redis.from_url(stack.effective_redis_url(), socket_timeout=10)
    try:
        wait_log(worker, " ready.")
        cases = _cases(worker.queue, task, marker, _signer(keys[role]) if keys else None)
        t0 = time.monotonic()
        tags = []
        for _, item, _ in cases:
            _push(admin, worker.queue, item)
            if isinstance(item, str) and item.startswith("{"):
                tags.append(json.loads(item)["properties"]["delivery_tag"])
        last = json.loads(cases[-1][1])["headers"]["id"]
        deadline = time.monotonic() + 90
        result = None
        while time.monotonic() < deadline and result is None:
            assert worker.proc.poll() is None, worker.log_text()[-3000:]
            result = admin.get(f"celery-task-meta-{last}")
            time.sleep(0.2)
        took = round(time.monotonic() - t0, 2)
        assert result is not None, worker.log_text()[-3000:]
        answer = json.loads(result)
        assert answer["status"] == "SUCCESS" and answer["result"]["ok"] is False, answer  # a recorded error
        assert not marker.exists()  # no pickle ran, outer or inner
        assert worker.proc.poll() is None
        assert admin.llen(worker.queue) == 0
        assert not any(admin.hexists("unacked", t) for t in tags)  # nothing can come back
        expected: dict[str, int] = {}
        for _, _, reason in cases:
            if reason:
                expected[reason] = expected.get(reason, 0) + 1
        deadline = time.monotonic() + 10
        while True:
            counted: dict[str, float] = {}
            for (_, _, reason), v in refused_metric(stack, pool).items():
                counted[reason] = counted.get(reason, 0) + v
            if counted == expected or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert counted == expected, (counted, worker.log_text()[-3000:])
        log = worker.log_text()
        assert log.count('"message dropped"') + log.count('"broker item dropped"') == sum(expected.values())
    finally:
        worker.stop()
    return harness.FaultResult(
        fault=f"{len(cases) - 1} undecodable or invalid messages on the {pool} pool"
        f" ({'signed' if signed else 'unsigned'} stack)",
        tasks_affected=len(cases) - 1,
        recovered=len(cases) - 1,
        lost=0,
        duplicated=0,
        time_to_recover_s=took,
        failures_recorded=len(cases) - 1,
        notes="dropped, logged and counted by reason; no pickle ran; the worker stayed up and ran"
        " the next task",
        extra={"reasons": expected, "cases": [c for c, _, _ in cases]},
    )


@pytest.mark.parametrize(("pool", "role", "queue"), [("query", "chat", "query"), ("control", "relay", "acl")])
def test_junk_a_producer_user_pushes_onto_its_queue_never_stops_the_pool(stack, pool, role, queue):
    """The review's reproduction: 16 bytes of non-JSON ``LPUSH``ed by the producer's own Redis user
    onto the queue its pool consumes (it ended the worker: "Unrecoverable error: JSONDecodeError"),
    then a task from the same user, which the pool still runs."""
    from ragline.shared.worker.metrics_server import metrics_dir, reset_dir

    task = POOLS[pool][0]
    reset_dir(metrics_dir(stack, pool))
    # the pool under test must be the queue's only consumer: an earlier test of the session may have
    # started the in-process worker (tests/conftest.py celery_worker), which consumes every queue
    others = _pause_other_consumers(queue)
    worker = start_pool(stack, pool, queue=queue, env={"RAGLINE_WORKERS_WARMUP": "false"})
    producer = redis.Redis.from_url(
        stack.redis_role_url(stack.runtime()["redis_url"], role), socket_timeout=10
    )
    admin = redis.Redis.from_url(stack.effective_redis_url(), socket_timeout=10)
    try:
        wait_log(worker, " ready.")
        task_id = f"{role}-{uuid.uuid4()}"
        body = json.dumps([[{"not": "a payload"}], {}, EMBED]).encode()
        producer.lpush(queue, b"\x00not json \xff\xfe!!")  # 16 bytes
        producer.lpush(queue, _envelope(queue, task, body, "application/json", "utf-8", task_id))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not admin.exists(f"celery-task-meta-{task_id}"):
            assert worker.proc.poll() is None, worker.log_text()[-3000:]
            time.sleep(0.2)
        assert json.loads(admin.get(f"celery-task-meta-{task_id}"))["result"]["ok"] is False
        assert worker.proc.poll() is None
        assert '"broker item dropped"' in worker.log_text()
        counted = refused_metric(stack, pool)
        assert counted.get(("-", "none", "not_json")) == 1, counted
    finally:
        worker.stop()
        _resume_consumers(queue, others)


def _pause_other_consumers(queue: str) -> list[str]:
    """The workers already consuming ``queue``, told to stop consuming it (Celery's remote control)."""
    from ragline.shared.worker.celery_app import app

    active = app.control.inspect(timeout=2).active_queues() or {}
    names = [name for name, queues in active.items() if any(q["name"] == queue for q in queues)]
    if names:
        app.control.cancel_consumer(queue, destination=names, reply=True, timeout=5)
    return names


def _resume_consumers(queue: str, names: list[str]) -> None:
    from ragline.shared.worker.celery_app import app

    if names:
        app.control.add_consumer(queue, destination=names, reply=True, timeout=5)


def test_a_non_message_on_the_remote_control_channel_never_stops_a_pool(stack):
    """JSON that is no kombu message and JSON nested 100,000 deep, published by the ``flower`` user
    (which may publish remote control broadcasts) on the workers' broadcast channel: dropped and
    counted, the worker still answers a ping."""
    from ragline.shared.worker.celery_app import app
    from ragline.shared.worker.metrics_server import metrics_dir, reset_dir
    from tests.pools import wait_ready

    reset_dir(metrics_dir(stack, "query"))
    worker = start_pool(stack, "query", env={"RAGLINE_WORKERS_WARMUP": "false"})
    flower = redis.Redis.from_url(
        stack.redis_role_url(stack.runtime()["redis_url"], "flower"), socket_timeout=10
    )
    try:
        wait_ready(app, worker)
        assert flower.publish("/0.celery.pidbox", json.dumps(["not", "a", "message"])) >= 1
        assert flower.publish("/0.celery.pidbox", "[" * 100_000) >= 1
        deadline = time.monotonic() + 30
        while worker.log_text().count('"broker item dropped"') < 2 and time.monotonic() < deadline:
            assert worker.proc.poll() is None, worker.log_text()[-3000:]
            time.sleep(0.2)
        wait_ready(app, worker)
        assert worker.proc.poll() is None
        counted = refused_metric(stack, "query")
        assert counted.get(("-", "none", "envelope")) == 1 and counted.get(("-", "none", "not_json")) == 1
    finally:
        worker.stop()
