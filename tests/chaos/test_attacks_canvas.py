"""Canvas escalation attacks; results in bench/results/chaos.json (section ``canvas_attacks``).

* **Chat key**: ``ragline.query.retrieve`` (a task the chat role may send) carrying ``link``, several
  links, a chain, a chord, a group member with a link and a chain inside a link, each smuggling an
  ingest task, plus a link widening an exec-only document to ``staff``; several rounds. Every one is
  refused at once (``SecurityError``), counted (``rag_tasks_refused{reason="canvas"}``), nothing is
  stored or widened, a staff search still returns nothing, the worker stays up.
* **Relay key**: the same forms on ``ragline.ingest.event``, the relay's own task: refused the same way.
* **Operator key**: a link from one question to another runs (a canvas role keeps its canvas).
* **Unsigned stack** (no signing, the Redis password alone): a link to an ingest task and Celery's
  ``celery.group`` are refused too; the same password could send the ingest task directly, which
  docs/operations.md ("Security model") states.

The reduced version, one round of the chat key's forms, runs in ``make test``
(tests/integration/test_canvas_escalation.py).
"""

from __future__ import annotations

import time

import pytest

from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT, TASK_INGEST_EVENT, TASK_QUERY_RETRIEVE
from tests.chaos import harness
from tests.integration.test_canvas_escalation import CANVAS_PRODUCER, FORMS, attacks, messages
from tests.integration.test_producer_roles import make_keys, produce, refused_lines, refused_metric, send
from tests.pools import start_pool, wait_log

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

ROUNDS = 3


def _secret(tenant: str) -> dict:
    return {
        "tenant": tenant,
        "doc_id": "exec.md",
        "fmt": "md",
        "content": "# Правление\n\nСекретный план правления.\n",
        "acl": ["exec"],
    }


def _stored(conn, tenant: str) -> dict[str, list[str]]:
    rows = conn.execute("SELECT doc_id, acl FROM documents WHERE tenant = %s", (tenant,)).fetchall()
    return {r["doc_id"]: sorted(r["acl"]) for r in rows}


def _chunk_acls(conn, tenant: str) -> list[list[str]]:
    rows = conn.execute("SELECT DISTINCT acl FROM chunks WHERE tenant = %s", (tenant,)).fetchall()
    return sorted(sorted(r["acl"]) for r in rows)


def _refused(outcomes: list[dict], needle: str) -> list[dict]:
    return [o for o in outcomes if o.get("error") == "SecurityError" and needle in o.get("detail", "")]


def _wait_lines(worker, n: int) -> list[dict]:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(refused_lines(worker.log_text())) < n:
        time.sleep(0.2)
    return refused_lines(worker.log_text())


def test_canvas_escalation_by_every_sender(stack, tmp_path, tenant, conn):
    from ragline.shared.worker.metrics_server import metrics_dir, reset_dir

    keys = make_keys(tmp_path)
    question = {"query": "план правления", "tenant": tenant, "groups": ["staff"], "mode": "lexical"}
    event = {"type": "delete", "tenant": tenant, "doc_id": "exec.md"}  # the relay's own task
    rows = []

    # ---- a signed worker: chat, relay and operator keys
    reset_dir(metrics_dir(stack, "query"))
    worker = start_pool(stack, "query", env={**keys["worker"], "RAGLINE_WORKERS_WARMUP": "false"})
    try:
        wait_log(worker, " ready.")
        q = worker.queue
        stored = produce(keys["operator"], [send(TASK_INGEST_DOCUMENT, _secret(tenant), q, wait=180)])
        assert stored[0].get("result", {}).get("status") == "stored", stored

        chat_sends = attacks(tenant) * ROUNDS
        t0 = time.monotonic()
        chat = produce(
            keys["chat"], {"queue": q, "question": question, "attacks": chat_sends}, script=CANVAS_PRODUCER
        )
        chat_s = time.monotonic() - t0
        relay_sends = [
            {**a, "outer": TASK_INGEST_EVENT, "outer_payload": event} for a in attacks(tenant, FORMS)
        ]
        relay = produce(
            keys["relay"],
            {"queue": q, "question": question, "attacks": relay_sends, "closing": False},
            script=CANVAS_PRODUCER,
        )
        # a canvas role keeps its canvas: the operator links one question to another
        linked = [{"form": "link", "task": TASK_QUERY_RETRIEVE, "payload": question}]
        operator = produce(
            keys["operator"], {"queue": q, "question": question, "attacks": linked}, script=CANVAS_PRODUCER
        )

        *chat_attacks, chat_plain = chat
        relay_attacks = relay
        chat_refused = _refused(chat_attacks, "'chat' may not send canvas options")
        relay_refused = _refused(relay_attacks, "'relay' may not send canvas options")
        assert len(chat_refused) == len(chat_attacks) == len(chat_sends), chat_attacks[:3]
        assert len(relay_refused) == len(relay_attacks) == len(relay_sends), relay_attacks[:3]
        assert operator[0].get("result", {}).get("hits") == [], operator  # ran (exec.md is not staff's)
        assert chat_plain.get("result", {}).get("hits") == [] and worker.proc.poll() is None
        assert _stored(conn, tenant) == {"exec.md": ["exec"]}
        assert _chunk_acls(conn, tenant) == [["exec"]]
        n_chat, n_relay = messages(chat_sends), messages(relay_sends)
        lines = _wait_lines(worker, n_chat + n_relay)
        counted = refused_metric(stack, "query")
        assert counted == {
            (TASK_QUERY_RETRIEVE, "chat", "canvas"): n_chat,
            (TASK_INGEST_EVENT, "relay", "canvas"): n_relay,
        }, counted
        assert len(lines) == n_chat + n_relay and "operator" not in {r["role"] for r in lines}
        # questions run: the chat's closing one, the operator's, its callback, its closing one
        ran = [
            r for r in harness.task_resources(worker.log_text()).values() if r["task"] == TASK_QUERY_RETRIEVE
        ]
        assert len(ran) == 4 and {r["state"] for r in ran} == {"SUCCESS"}, ran
    finally:
        worker.stop()
    rows.append(
        harness.FaultResult(
            fault="canvas escalation, chat key: link/chain/chord/group/nested smuggling ingest and ACL tasks",
            tasks_affected=n_chat,
            recovered=n_chat,
            lost=0,
            duplicated=0,
            time_to_recover_s=round(chat_s, 2),
            failures_recorded=int(counted[(TASK_QUERY_RETRIEVE, "chat", "canvas")]),
            notes=(
                f"{len(chat_sends)} attacks ({len(FORMS)} forms + an ACL-widening link, x{ROUNDS}) in {n_chat} "
                "messages, each refused at once with SecurityError; 0 documents stored, exec.md still exec-only, "
                "the staff question after them answered with no hit; worker up; "
                "time = first send to the last outcome"
            ),
            extra={"forms": list(FORMS)},
        )
    )
    rows.append(
        harness.FaultResult(
            fault="canvas escalation, relay key: the same forms on ragline.ingest.event",
            tasks_affected=n_relay,
            recovered=n_relay,
            lost=0,
            duplicated=0,
            time_to_recover_s=None,
            failures_recorded=int(counted[(TASK_INGEST_EVENT, "relay", "canvas")]),
            notes="every message refused (reason canvas); an operator's link between two questions ran",
        )
    )

    # ---- an unsigned stack: the Redis password alone
    reset_dir(metrics_dir(stack, "query"))
    plain = start_pool(stack, "query", env={"RAGLINE_WORKERS_WARMUP": "false"})
    try:
        wait_log(plain, " ready.")
        unsigned_sends = [
            *attacks(tenant, ("link", "chain", "chord", "group_member_link")),
            {
                "form": "builtin",
                "task": TASK_INGEST_DOCUMENT,
                "payload": attacks(tenant, ("link",))[0]["payload"],
            },
        ]
        unsigned = produce(
            {},
            {"queue": plain.queue, "question": question, "attacks": unsigned_sends},
            script=CANVAS_PRODUCER,
        )
        *unsigned_attacks, unsigned_plain = unsigned
        refused = _refused(unsigned_attacks, "an unsigned message may not")
        assert len(refused) == len(unsigned_attacks), unsigned_attacks
        assert unsigned_plain.get("result", {}).get("hits") == [] and plain.proc.poll() is None
        assert _stored(conn, tenant) == {"exec.md": ["exec"]}
        n_unsigned = messages(unsigned_sends)
        _wait_lines(plain, n_unsigned)
        counted = refused_metric(stack, "query")
        assert sum(
            v for (_, role, reason), v in counted.items() if reason == "canvas" and role == "none"
        ) == (n_unsigned), counted
    finally:
        plain.stop()
    rows.append(
        harness.FaultResult(
            fault="canvas on an unsigned stack: link/chain/chord/group member and celery.group",
            tasks_affected=n_unsigned,
            recovered=n_unsigned,
            lost=0,
            duplicated=0,
            time_to_recover_s=None,
            failures_recorded=n_unsigned,
            notes=(
                "refused (reason canvas, role none); the Redis password alone still sends any ragline task"
                " directly: this narrows nothing an attacker with it needs (docs/operations.md, Security model)"
            ),
        )
    )
    harness.record("canvas_attacks", rows)
    assert "canvas escalation, chat key" in harness.markdown_table()
