"""Attacks by producers and on the stack's passwords; results in bench/results/chaos.json
(sections ``producer_role_attacks`` and ``password_attacks``).

* **Wrong-role tasks**: a chat backend's key (certificate ``ragline-chat``) floods a signed query
  worker with ingest, batch, ACL and Celery canvas tasks mixed with its own questions. Every
  forbidden task is refused with a failed result, nothing is ingested or changed, every question is
  answered, the worker stays up, and ``rag_tasks_refused`` counts each refusal.
* **Unsigned and forged messages** (a key the store does not trust, whatever role its certificate
  claims): dropped by Celery's signature check, never run, counted.
* **Default password on a non-loopback bind**: the metrics server and ``ragline up`` (Flower) asked to
  listen on 0.0.0.0 with a well-known or empty password refuse to start; nothing listens.
* **No password on the embedded Redis**: an unauthenticated client, or one using an old default, is
  refused.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ragline.shared.sdk.names import (
    TASK_ACL_SYNC,
    TASK_INGEST_BATCH,
    TASK_INGEST_DOCUMENT,
    TASK_QUERY_RETRIEVE,
)
from tests.certs import self_signed
from tests.chaos import harness
from tests.integration.test_producer_roles import make_keys, produce, refused_metric
from tests.pools import start_pool, wait_log

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

#: sends everything first, then waits for every outcome: the refusals and the answers interleave
FLOOD = """
import json, sys, time
from ragline.shared.worker.celery_app import app
sends = json.loads(sys.argv[1])
t0 = time.monotonic()
pending = [(s, app.send_task(s["task"], args=s["args"], queue=s["queue"])) for s in sends]
sent_s = time.monotonic() - t0
out = []
for s, r in pending:
    try:
        out.append({"kind": s["kind"], "result": r.get(timeout=s["wait"])})
    except Exception as exc:
        out.append({"kind": s["kind"], "error": type(exc).__name__, "detail": str(exc)[:200]})
print(json.dumps({"sent_s": sent_s, "done_s": time.monotonic() - t0, "outcomes": out}))
"""


def _flood(env: dict, sends: list[dict]) -> dict:
    return produce(env, sends, timeout=600, script=FLOOD)


def _closed(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) != 0


def _raw_redis(port: int, *args: bytes) -> bytes:
    """One command's first reply line (redis-py would retry an authentication error)."""
    request = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        return sock.makefile("rb").readline().rstrip(b"\r\n")


def test_wrong_role_unsigned_and_forged_tasks(stack, tmp_path, tenant, conn):
    from ragline.shared.worker.metrics_server import metrics_dir, reset_dir

    keys = make_keys(tmp_path)
    rogue = tmp_path / "rogue"
    rogue.mkdir()
    rogue_key, rogue_cert = self_signed(rogue, "ragline-operator")  # claims the widest role, untrusted
    forged = {
        "RAGLINE_OPS_SIGNING_KEY_FILE": str(rogue_key),
        "RAGLINE_OPS_SIGNING_CERT_FILE": str(rogue_cert),
        "RAGLINE_OPS_SIGNING_CERT_STORE": str(rogue),
    }
    reset_dir(metrics_dir(stack, "query"))
    worker = start_pool(
        stack, "query", concurrency=2, env={**keys["worker"], "RAGLINE_WORKERS_WARMUP": "false"}
    )
    rows = []
    try:
        wait_log(worker, " ready.")
        q = worker.queue
        question = {"query": "очередь индексации", "tenant": tenant, "groups": ["g"], "mode": "lexical"}
        doc = {
            "tenant": tenant,
            "doc_id": "evil.md",
            "fmt": "md",
            "content": "# Чужой\n\nТекст.\n",
            "acl": ["g"],
        }
        attacks = (
            [(TASK_INGEST_DOCUMENT, [doc])] * 10
            + [(TASK_INGEST_BATCH, [{"documents": [doc]}])] * 5
            + [(TASK_ACL_SYNC, [{"items": [{"tenant": tenant, "doc_id": "evil.md", "acl": ["all"]}]}])] * 10
            + [("celery.group", [[], None, None])] * 5
        )
        sends = []
        for i, (task, args) in enumerate(attacks):
            sends.append({"kind": task, "task": task, "args": args, "queue": q, "wait": 120})
            if i % 3 == 0:
                sends.append(
                    {
                        "kind": "question",
                        "task": TASK_QUERY_RETRIEVE,
                        "args": [question],
                        "queue": q,
                        "wait": 120,
                    }
                )
        flood = _flood(keys["chat"], sends)
        outcomes = flood["outcomes"]
        refused = [o for o in outcomes if o["kind"] != "question"]
        answered = [o for o in outcomes if o["kind"] == "question" and o.get("result", {}).get("hits") == []]
        questions = [o for o in outcomes if o["kind"] == "question"]
        assert all(
            o.get("error") == "SecurityError" and "'chat' may not send" in o["detail"] for o in refused
        ), [o for o in refused if o.get("error") != "SecurityError"][:3]
        assert len(answered) == len(questions) and questions, questions[:3]
        assert worker.proc.poll() is None
        stored = conn.execute("SELECT count(*) AS n FROM documents WHERE tenant = %s", (tenant,)).fetchone()[
            "n"
        ]
        assert stored == 0
        counted = refused_metric(stack, "query")
        by_role = sum(v for (task, role, reason), v in counted.items() if role == "chat" and reason == "role")
        assert by_role == len(refused)
        rows.append(
            harness.FaultResult(
                fault="wrong-role tasks: chat key sends ingest, batch, ACL and celery.group tasks",
                tasks_affected=len(refused),
                recovered=len(refused),
                lost=len(questions) - len(answered),
                duplicated=0,
                time_to_recover_s=round(flood["done_s"], 2),
                failures_recorded=int(by_role),
                notes=(
                    f"{len(refused)} forbidden tasks refused with a failed result (SecurityError), "
                    f"{len(answered)}/{len(questions)} interleaved questions answered, 0 documents stored, "
                    f"worker up; rag_tasks_refused{{role=chat,reason=role}} = {int(by_role)}; "
                    "time = first send to last outcome"
                ),
                extra={"sent_s": round(flood["sent_s"], 3)},
            )
        )

        n = 5
        unsigned = produce({}, [{"task": TASK_QUERY_RETRIEVE, "args": [question], "queue": q, "wait": 2}] * n)
        fake = produce(forged, [{"task": TASK_QUERY_RETRIEVE, "args": [question], "queue": q, "wait": 2}] * n)
        after = produce(
            keys["chat"], [{"task": TASK_QUERY_RETRIEVE, "args": [question], "queue": q, "wait": 60}]
        )
        took = after[0].get("s")  # the first signed question after the attack, sent to answered
        assert all(o.get("error") == "TimeoutError" for o in unsigned + fake), unsigned + fake
        assert after[0].get("result", {}).get("hits") == [] and worker.proc.poll() is None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            counted = refused_metric(stack, "query")
            dropped = {
                reason: sum(v for (_, _, r), v in counted.items() if r == reason)
                for reason in ("unsigned", "signature")
            }
            if dropped == {"unsigned": n, "signature": n}:
                break
            time.sleep(0.3)
        assert dropped == {"unsigned": n, "signature": n}, dropped
        rows.append(
            harness.FaultResult(
                fault="unsigned and forged messages (untrusted key claiming ragline-operator)",
                tasks_affected=2 * n,
                recovered=2 * n,
                lost=0,
                duplicated=0,
                time_to_recover_s=round(took, 3),
                failures_recorded=int(sum(dropped.values())),
                notes=(
                    f"{n} unsigned (ContentDisallowed, rejected) and {n} forged (bad signature, dropped) never"
                    " ran; worker up; time = the signed question sent right after, sent to answered"
                ),
                extra=dropped,
            )
        )
    finally:
        worker.stop()
    harness.record("producer_role_attacks", rows)
    assert "wrong-role tasks" in harness.markdown_table()


def test_default_passwords_beyond_loopback_and_redis_without_password(stack):
    """Binds beyond loopback with default or empty passwords, and Redis clients without the password."""
    from ragline.shared.stack.processes import child_env
    from ragline.shared.stack.services import free_port
    from ragline.shared.worker import credentials
    from ragline.shared.worker.metrics_server import metrics_dir

    attempts = []
    metrics_dir(stack, "ingest").mkdir(parents=True, exist_ok=True)
    for password in ("ragline-metrics", "", "metrics"):  # old default, empty, the user name
        port = free_port()
        env = {
            **child_env(stack),
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir(stack, "ingest")),
            "RAGLINE_OPS_METRICS_HOST": "0.0.0.0",
            "RAGLINE_OPS_METRICS_PORT": str(port),
            "RAGLINE_OPS_METRICS_PASSWORD": password,
        }
        out = subprocess.run(
            [sys.executable, "-m", "ragline.shared.worker.metrics_server", "ingest"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        attempts.append(out.returncode == 1 and "refusing to serve" in out.stderr and _closed(port))
    home = Path(tempfile.mkdtemp(prefix="rl-attack-")) / "home"
    flower_port = free_port()
    env = {
        **os.environ,
        "RAGLINE_SERVICES_HOME": str(home),
        "RAGLINE_FLOWER_HOST": "0.0.0.0",
        "RAGLINE_FLOWER_PORT": str(flower_port),
        "RAGLINE_FLOWER_PASSWORD": "ragline-admin",
    }
    up = subprocess.run(
        [sys.executable, "-m", "ragline.cli", "up"], env=env, capture_output=True, text=True, timeout=120
    )
    nothing_started = not (home / "pg").exists() and not (home / "run").exists() and _closed(flower_port)
    attempts.append(
        up.returncode == 1 and "refusing to serve Flower on 0.0.0.0" in up.stderr and nothing_started
    )
    shutil.rmtree(home.parent, ignore_errors=True)
    assert all(attempts), (attempts, up.stderr[-2000:])

    port = int(stack.runtime()["redis_port"])
    replies = [
        _raw_redis(port, b"PING"),
        _raw_redis(port, b"AUTH", b"ragline-admin"),
        _raw_redis(port, b"AUTH", b"default", b"ragline-metrics"),
        _raw_redis(port, b"AUTH", b"default", b""),
    ]
    assert [r.split()[0] for r in replies] == [b"-NOAUTH", b"-WRONGPASS", b"-WRONGPASS", b"-WRONGPASS"], (
        replies
    )
    operator = credentials.password(stack, "redis").encode()
    assert _raw_redis(port, b"AUTH", operator).startswith(b"-WRONGPASS")  # the default user is off
    assert _raw_redis(port, b"AUTH", b"operator", operator) == b"+OK"
    rows = [
        harness.FaultResult(
            fault="default or empty password on a non-loopback bind (metrics x3, Flower via ragline up)",
            tasks_affected=len(attempts),
            recovered=sum(attempts),
            lost=0,
            duplicated=0,
            time_to_recover_s=None,
            failures_recorded=sum(attempts),
            notes=(
                "metrics server on 0.0.0.0 with ragline-metrics / empty / user-as-password and `ragline up` with"
                " Flower on 0.0.0.0 and ragline-admin: exit 1 with the reason, nothing listens, nothing started"
            ),
        ),
        harness.FaultResult(
            fault="clients without the embedded Redis password (none, old defaults, empty)",
            tasks_affected=len(replies),
            recovered=len(replies),
            lost=0,
            duplicated=0,
            time_to_recover_s=None,
            failures_recorded=len(replies),
            notes="NOAUTH without a password, WRONGPASS with ragline-admin, ragline-metrics or empty",
            extra={"replies": [r.decode() for r in replies]},
        ),
    ]
    harness.record("password_attacks", rows)
    assert "non-loopback bind" in harness.markdown_table()
