"""A relay tries to make a permission change unrevocable; results in bench/results/chaos.json
(section ``acl_clock_attacks``).

On a signed control pool started like ``ragline up`` (the worker's key), a relay's key sends, on
every entry point that changes permissions (a raw ``ragline.acl.sync``, the client's ``sync_acl``,
an acl event, an upsert event's ``acl``): a change naming itself ``operator`` with a version a
minute ahead (inside the allowed skew), the same with the ``ragline_sender: operator`` header a
producer could add, a change dated 2100, and a forced change. Then the operator's key revokes the
staff group of every document the way ``ragline acl set --version`` does. Every revocation must
apply (staff finds none of the documents), every 2100 change and every relay ``force`` must be
refused with the reason, and no relay change may be recorded under the operator.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.sdk.names import TASK_ACL_SYNC, TASK_INGEST_EVENT
from tests.chaos import harness
from tests.integration.lifecycle_helpers import put_document
from tests.integration.test_producer_roles import make_keys, produce
from tests.pools import start_pool, wait_log

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

SEND = """
import json, sys, time
from ragline.shared.worker.celery_app import app
from ragline.shared.sdk.client import RaglineClient, sync_acl_call
sends = json.loads(sys.argv[1])
t0 = time.monotonic()
out = []
for s in sends:
    try:
        if s.get("via") == "client":
            call = sync_acl_call(s["payload"]["items"])
            client = RaglineClient(timeout=s["wait"])
            out.append({"result": client._call(call.task, call.payload, s["wait"], queue=s["queue"])})
            continue
        r = app.send_task(s["task"], args=[s["payload"]], queue=s["queue"], headers=s.get("headers"))
        out.append({"result": r.get(timeout=s["wait"])})
    except Exception as exc:  # the client raises a worker's structured error: the same shape
        if hasattr(exc, "error"):
            out.append({"result": {"ok": False, "error": exc.error, "detail": str(exc.detail)}})
        else:
            out.append({"error": type(exc).__name__, "detail": str(exc)[:300]})
print(json.dumps({"s": time.monotonic() - t0, "outcomes": out}))
"""

PATHS = ("acl_sync task", "client sync_acl", "acl event", "upsert event")
TEXT = "Премии руководителей за квартал утверждает совет директоров."


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat()


def _send(path: str, tenant: str, doc_id: str, version: str, queue: str, **extra) -> dict:
    """What a relay sends on ``path`` to widen ``doc_id`` to staff (``extra``: producer, headers, force)."""
    producer = {"producer": extra["producer"]} if "producer" in extra else {}
    base = {"queue": queue, "wait": 120, "headers": extra.get("headers")}
    if path in ("acl_sync task", "client sync_acl"):
        item = {"tenant": tenant, "doc_id": doc_id, "acl": ["staff", "exec"], "version": version, **producer}
        payload = {"items": [item]} | ({"force": True} if extra.get("force") else {})
        return {
            "task": TASK_ACL_SYNC,
            "payload": payload,
            "via": "client" if "client" in path else "app",
        } | base
    ev = {"tenant": tenant, "doc_id": doc_id, "acl": ["staff", "exec"], "version": version, **producer}
    ev |= {"type": "acl"} if path == "acl event" else {"type": "upsert", "uri": "https://docs.example/b.md"}
    return {"task": TASK_INGEST_EVENT, "payload": ev} | base


def _staff_finds(tenant: str) -> set[str]:
    from ragline.query.service import search

    req = SearchRequest(query="премии руководителей", tenant=tenant, groups=["staff"], mode="lexical")
    return {h.doc_id for h in search(req).hits}


def test_a_relay_cannot_make_a_revocation_stale(stack, tmp_path, tenant, conn):
    keys = make_keys(tmp_path)
    worker = start_pool(
        stack, "control", concurrency=2, env={**keys["worker"], "RAGLINE_WORKERS_WARMUP": "false"}
    )
    rows = []
    try:
        wait_log(worker, " ready.")
        q = worker.queue
        docs = {path: f"board-{i}.md" for i, path in enumerate(PATHS)}
        now_ns = time.time_ns()
        for doc_id in docs.values():  # content newer than any event: an upsert only changes the ACL
            put_document(tenant, doc_id, [TEXT], acl=["exec"], version=now_ns + 3_600 * 10**9)
        ahead, ahead_more = _iso(now_ns + 60 * 10**9), _iso(now_ns + 61 * 10**9)
        attacks = {
            "forged producer": [_send(p, tenant, d, ahead, q, producer="operator") for p, d in docs.items()],
            "forged sender header": [
                _send(
                    p, tenant, d, ahead_more, q, producer="operator", headers={"ragline_sender": "operator"}
                )
                for p, d in docs.items()
            ],
            "far-future version (2100)": [
                _send(p, tenant, d, "2100-01-01T00:00:00Z", q, producer="operator") for p, d in docs.items()
            ],
            "relay force": [
                _send(p, tenant, d, ahead, q, force=True) for p, d in docs.items() if p == "acl_sync task"
            ],
        }
        sent = [s for group in attacks.values() for s in group]
        relay = produce(keys["relay"], sent, timeout=600, script=SEND)
        outcomes = iter(relay["outcomes"])
        by_kind = {kind: [next(outcomes) for _ in group] for kind, group in attacks.items()}
        for kind in ("forged producer", "forged sender header"):  # a relay may widen: it applies
            for o in by_kind[kind]:
                result = o.get("result", {})
                assert result.get("ok") is not False and "error" not in o, o
                assert (
                    result.get("documents_updated") == 1
                    or result.get("acl_outcome") == "applied"
                    or (result.get("outcome") == "acl_applied")
                ), o
        for o in by_kind["far-future version (2100)"]:
            result = o.get("result", {})
            assert result.get("error") == "invalid payload", o
            assert "ahead of the server's clock" in str(result["detail"]), o
        for o in by_kind["relay force"]:
            result = o.get("result", {})
            assert result.get("error") == "refused" and "may not force" in result["detail"], o
        assert _staff_finds(tenant) == set(docs.values())  # the forged changes did widen them

        # the operator revokes staff everywhere, as `ragline acl set DOC --acl exec --version NOW` sends it
        t0 = time.monotonic()
        revoke = {
            "items": [
                {
                    "tenant": tenant,
                    "doc_id": d,
                    "acl": ["exec"],
                    "version": _iso(time.time_ns()),
                    "ts": time.time(),
                }
                | {"producer": "operator"}
                for d in docs.values()
            ],
            "missing": "report",
        }
        op = produce(
            keys["operator"],
            [{"task": TASK_ACL_SYNC, "payload": revoke, "queue": q, "wait": 120}],
            script=SEND,
        )
        took = time.monotonic() - t0
        result = op["outcomes"][0]["result"]
        assert (result["documents_updated"], result["ignored_stale"]) == (len(docs), 0), result
        assert _staff_finds(tenant) == set()
        versions = conn.execute(
            "SELECT doc_id, acl, acl_versions FROM documents WHERE tenant = %s ORDER BY doc_id", (tenant,)
        ).fetchall()
        assert all(r["acl"] == ["exec"] for r in versions)
        keys_written = {k for r in versions for k in r["acl_versions"]}
        assert {k.split("/")[0] for k in keys_written} == {"relay", "operator"}, keys_written
        assert {k for k in keys_written if k.startswith("operator/")} == {"operator/operator"}
        assert worker.proc.poll() is None
        conn.commit()
    finally:
        worker.stop()
    n = {kind: len(group) for kind, group in attacks.items()}
    rows.append(
        harness.FaultResult(
            fault="relay key: forged producer 'operator' / forged sender header, a minute ahead, x4 entry points",
            tasks_affected=n["forged producer"] + n["forged sender header"],
            recovered=n["forged producer"] + n["forged sender header"],  # every widening revoked
            lost=0,
            duplicated=0,
            time_to_recover_s=round(took, 3),
            failures_recorded=0,
            notes=(
                "the relay's changes apply (a relay may change permissions) under relay/operator, never"
                f" operator/*; the operator's revocation then applies to all {len(docs)} documents, 0 stale,"
                " staff finds none; time = revocation sent to applied"
            ),
            extra={"acl_versions_keys": sorted(keys_written)},
        )
    )
    rows.append(
        harness.FaultResult(
            fault="relay key: versions dated 2100 (x4 entry points) and a raw acl.sync with force=true",
            tasks_affected=n["far-future version (2100)"] + n["relay force"],
            recovered=n["far-future version (2100)"] + n["relay force"],
            lost=0,
            duplicated=0,
            time_to_recover_s=None,
            failures_recorded=n["far-future version (2100)"] + n["relay force"],
            notes=(
                "2100: invalid payload, 'ahead of the server's clock by more than 300 s'; force: refused,"
                " 'a relay sender may not force'; nothing changed by either"
            ),
        )
    )
    harness.record("acl_clock_attacks", rows)
    assert "forged producer" in harness.markdown_table()
