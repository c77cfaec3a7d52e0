"""A chat key cannot run other tasks through Celery's canvas, on a real signed worker process.

The attack: a chat backend's key (certificate ``ragline-chat``) sends a question it may send,
``ragline.query.retrieve``, carrying canvas options: ``link`` to an ingest task or to an ACL change
widening an exec-only document to ``staff``, a chain, a chord whose body ingests, a group member with
a link. Without the canvas check each question is answered and the worker then sends the linked
task itself, signed with the worker's key: the chat key stores documents and changes permissions.
With it, each of those messages is refused like a task of the wrong role (failed result at once,
``task refused`` logged, ``rag_tasks_refused{reason="canvas"}``), nothing runs, and the worker keeps
answering. The same scenario, with counts, runs in ``make chaos``
(tests/chaos/test_attacks_canvas.py). The decision over every form and role is unit-tested in
tests/unit/test_canvas_admission.py."""

from __future__ import annotations

import pytest

from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT, TASK_QUERY_RETRIEVE
from tests.integration.test_producer_roles import make_keys, produce, refused_lines, refused_metric, send
from tests.pools import start_pool, wait_log

pytestmark = pytest.mark.slow

#: sends each attack form, waits for each outcome, then (unless ``closing`` is false) one plain
#: question; the worker runs one task at a time, so by the time that question is answered every task
#: an attack made the worker send (before it stored the attack's result) has run
CANVAS_PRODUCER = """
import json, sys
from celery import chain, chord, group
from ragline.shared.worker.celery_app import app
spec = json.loads(sys.argv[1])
q, question, attacks = spec["queue"], spec["question"], spec["attacks"]
RETRIEVE = "ragline.query.retrieve"
wait = spec.get("wait", 60)

def sig(task, payload, **options):
    return app.signature(task, args=[payload], immutable=True, queue=q, **options)

def inner(a):
    return sig(a["task"], a["payload"])

def send(a):
    form, outer = a["form"], sig(a.get("outer", RETRIEVE), a.get("outer_payload", question))
    if form == "link":
        return outer.apply_async(link=inner(a))
    if form == "links":
        return outer.apply_async(link=[inner(a), inner(a)])
    if form == "chain":
        return chain(outer, inner(a)).apply_async()
    if form == "chord":
        return chord([outer], inner(a)).apply_async().parent
    if form == "group_member_link":
        return group(outer.clone().set(link=inner(a)), outer.clone()).apply_async().results[0]
    if form == "chain_in_link":
        return outer.apply_async(link=chain(sig(RETRIEVE, question), inner(a)))
    if form == "builtin":
        return app.send_task("celery.group", args=[[dict(inner(a))], None, None], queue=q)
    raise ValueError(form)

out = []
for a in attacks:
    r = send(a)
    try:
        out.append({"form": a["form"], "result": r.get(timeout=wait)})
    except Exception as exc:
        out.append({"form": a["form"], "error": type(exc).__name__, "detail": str(exc)[:300]})
if spec.get("closing", True):
    r = app.send_task(RETRIEVE, args=[question], queue=q)
    out.append({"form": "plain", "result": r.get(timeout=120)})
print(json.dumps(out))
"""

FORMS = ("link", "links", "chain", "chord", "group_member_link", "chain_in_link")
#: the messages a form puts on the wire with canvas options (a group's members all carry its id)
MESSAGES = {"group_member_link": 2}


def messages(sends: list[dict]) -> int:
    return sum(MESSAGES.get(s["form"], 1) for s in sends)


def attacks(tenant: str, forms: tuple[str, ...] = FORMS) -> list[dict]:
    """One attack per form smuggling an ingest (a document ``evil-<form>.md`` visible to ``staff``),
    and a link widening ``exec.md`` to ``staff``."""
    out = []
    for form in forms:
        doc = {
            "tenant": tenant,
            "doc_id": f"evil-{form}.md",
            "fmt": "md",
            "content": f"# Чужой {form}\n\nЭтот документ прислал чат.\n",
            "acl": ["staff"],
        }
        out.append({"form": form, "task": TASK_INGEST_DOCUMENT, "payload": doc})
    widen = {"items": [{"tenant": tenant, "doc_id": "exec.md", "acl": ["exec", "staff"], "version": 2}]}
    out.append({"form": "link", "task": "ragline.acl.sync", "payload": widen})
    return out


def run_attack(stack, tmp_path, tenant, conn, forms: tuple[str, ...] = FORMS) -> dict:
    """The scenario on a signed query worker: an exec-only document ingested with the operator's key,
    the attacks with the chat key; what came back, what is stored, what the worker counted."""
    import time

    from ragline.shared.worker.metrics_server import metrics_dir, reset_dir

    keys = make_keys(tmp_path)
    reset_dir(metrics_dir(stack, "query"))
    worker = start_pool(stack, "query", env={**keys["worker"], "RAGLINE_WORKERS_WARMUP": "false"})
    try:
        wait_log(worker, " ready.")
        q = worker.queue
        secret = {
            "tenant": tenant,
            "doc_id": "exec.md",
            "fmt": "md",
            "content": "# Правление\n\nСекретный план правления.\n",
            "acl": ["exec"],
        }
        stored = produce(keys["operator"], [send(TASK_INGEST_DOCUMENT, secret, q, wait=180)])
        assert stored[0].get("result", {}).get("status") == "stored", stored
        question = {"query": "план правления", "tenant": tenant, "groups": ["staff"], "mode": "lexical"}
        sends = attacks(tenant, forms)
        t0 = time.monotonic()
        outcomes = produce(
            keys["chat"],
            {"queue": q, "question": question, "attacks": sends},
            script=CANVAS_PRODUCER,
            timeout=600,
        )
        took = time.monotonic() - t0
        docs = conn.execute(
            "SELECT doc_id, acl FROM documents WHERE tenant = %s ORDER BY doc_id", (tenant,)
        ).fetchall()
        chunk_acls = conn.execute(
            "SELECT DISTINCT acl FROM chunks WHERE tenant = %s AND doc_id = 'exec.md'", (tenant,)
        ).fetchall()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(refused_lines(worker.log_text())) < messages(sends):
            time.sleep(0.2)
        return {
            "sends": sends,
            "outcomes": outcomes,
            "docs": {r["doc_id"]: sorted(r["acl"]) for r in docs},
            "exec_chunk_acls": [sorted(r["acl"]) for r in chunk_acls],
            "refused_lines": refused_lines(worker.log_text()),
            "counted": refused_metric(stack, "query"),
            "worker_up": worker.proc.poll() is None,
            "took_s": took,
        }
    finally:
        worker.stop()


def test_a_chat_key_cannot_ingest_or_widen_permissions_through_canvas(stack, tmp_path, tenant, conn):
    out = run_attack(stack, tmp_path, tenant, conn)
    *attacked, plain = out["outcomes"]
    # nothing the worker would have sent ran: no document of the chat's, the secret still exec-only
    assert out["docs"] == {"exec.md": ["exec"]}, out["docs"]
    assert out["exec_chunk_acls"] == [["exec"]]
    for o in attacked:
        assert o.get("error") == "SecurityError", o
        assert "'chat' may not send canvas options" in o["detail"], o
    assert plain.get("result", {}).get("hits") == [] and out["worker_up"]  # staff sees nothing
    lines, n = out["refused_lines"], messages(out["sends"])
    assert len(lines) == n and {(r["task"], r["role"]) for r in lines} == {(TASK_QUERY_RETRIEVE, "chat")}
    assert out["counted"] == {(TASK_QUERY_RETRIEVE, "chat", "canvas"): n}
