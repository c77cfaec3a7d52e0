"""Who a permission change comes from is the sender the worker verified, never the payload's word.

Every entry point that changes permissions (the client's ``sync_acl``, a raw ``ragline.acl.sync``
task, an acl event, an upsert event's ``acl``) is sent by a relay in three ways: naming itself the
operator with a version a minute ahead (within the allowed skew), with a version in 2100, and
normally. Afterwards the operator revokes the staff group exactly as ``ragline acl set --version``
sends it: the revocation must hold every time (staff no longer finds the document), and the 2100
change must be refused outright. The tasks run through Celery's ``Task.apply`` with the sender in
the headers, as the worker's strategy stamps it (shared/sdk/sender.py), on the real Postgres.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from ragline.shared.sdk.client import send_event_call, sync_acl_call
from ragline.shared.sdk.contracts import SearchRequest
from tests.integration.lifecycle_helpers import acl_of, put_document

TEXT = "Премии руководителей за квартал утверждает совет директоров."
FAR = "2100-01-01T00:00:00Z"
HEADER = "ragline_sender"


def _staff_sees(tenant: str) -> bool:
    from ragline.query.service import search

    req = SearchRequest(query="премии руководителей", tenant=tenant, groups=["staff"], mode="lexical")
    return any(h.doc_id == "bonus.md" for h in search(req).hits)


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat()


def _attack(path: str, tenant: str, version, producer: str | None) -> tuple[str, dict]:
    """The task and payload a relay sends on ``path``."""
    item = {"tenant": tenant, "doc_id": "bonus.md", "acl": ["staff", "exec"], "version": version}
    if producer:
        item["producer"] = producer
    if path == "client sync_acl":
        call = sync_acl_call([item])
        return call.task, call.payload
    if path == "acl_sync task":
        return "ragline.acl.sync", {"items": [item]}
    event = {"tenant": tenant, "doc_id": "bonus.md", "acl": item["acl"], "version": version}
    event |= {"producer": producer} if producer else {}
    if path == "acl event":
        call = send_event_call({"type": "acl", **event})
    else:  # an upsert older than the stored content: only its ACL is applied, nothing is enqueued
        call = send_event_call({"type": "upsert", "uri": "https://docs.example/bonus.md", **event})
    return call.task, call.payload


def _run(task: str, payload: dict, sender: str) -> dict:
    from ragline.shared.worker.celery_app import app

    app.loader.import_default_modules()
    for name in app.conf.include:
        __import__(name)
    return app.tasks[task].apply(args=[payload], headers={HEADER: sender}).get()


PATHS = ("client sync_acl", "acl_sync task", "acl event", "upsert event")
CASES = ("forged producer", "far-future version", "normal")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("path", PATHS)
def test_a_relay_cannot_make_the_operators_revocation_stale(stack, conn, path, case):
    tenant = f"t-senders-{PATHS.index(path)}-{CASES.index(case)}"  # the node name is too long to tell
    now_ns = time.time_ns()
    # the stored content is newer than any event below: an upsert only changes the permissions
    put_document(tenant, "bonus.md", [TEXT], acl=["staff", "exec"], version=now_ns + 3_600 * 10**9)
    version, producer = {
        "forged producer": (_iso(now_ns + 60 * 10**9), "operator"),
        "far-future version": (FAR, "operator"),
        "normal": (_iso(now_ns - 10**9), None),
    }[case]
    task, payload = _attack(path, tenant, version, producer)
    out = _run(task, payload, "relay")
    if case == "far-future version":
        assert out.get("ok") is False and out["error"] == "invalid payload", out
        assert "ahead of the server's clock" in str(out["detail"]), out
    else:
        assert out.get("ok") is not False, out
    conn.commit()
    # the operator revokes staff, as `ragline acl set bonus.md --acl exec --version <now>` sends it
    revoke = {
        "items": [
            {"tenant": tenant, "doc_id": "bonus.md", "acl": ["exec"], "version": _iso(time.time_ns())}
            | {"producer": "operator", "ts": time.time()}
        ],
        "missing": "report",
    }
    result = _run("ragline.acl.sync", revoke, "operator")
    assert (result["documents_updated"], result["ignored_stale"]) == (1, 0), result
    assert acl_of(conn, tenant, "bonus.md")[0] == ["exec"]
    assert not _staff_sees(tenant)


def test_a_relay_may_not_force_and_a_forced_change_is_recorded(stack, conn, tenant):
    put_document(tenant, "bonus.md", [TEXT], acl=["staff", "exec"])
    change = {"tenant": tenant, "doc_id": "bonus.md", "acl": ["exec"], "version": 5}
    refused = _run("ragline.acl.sync", {"items": [change], "force": True}, "relay")
    assert refused == {"ok": False, "error": "refused", "detail": refused["detail"]}
    assert "may not force" in refused["detail"] and acl_of(conn, tenant, "bonus.md")[0] == ["exec", "staff"]
    assert _run("ragline.acl.sync", {"items": [change]}, "operator")["documents_updated"] == 1
    older = {**change, "acl": ["exec", "staff"], "version": 4}
    stale = _run("ragline.acl.sync", {"items": [older]}, "operator")
    assert stale["ignored_stale"] == 1 and stale["stale"] == [
        {"tenant": tenant, "doc_id": "bonus.md", "producer": "operator/sync", "version": 4, "last_version": 5}
    ]
    forced = _run("ragline.acl.sync", {"items": [older], "force": True}, "operator")
    assert (forced["documents_updated"], forced["forced"]) == (1, 1) and _staff_sees(tenant)
    record = conn.execute("SELECT result FROM jobs WHERE id = %s", (forced["job_id"],)).fetchone()["result"]
    assert record["force"] is True and record["sender"] == "operator" and record["forced"] == 1


def _cli(*args: str):
    from ragline.cli import app as cli

    return CliRunner().invoke(cli, list(args))


def test_acl_set_whose_change_is_ignored_exits_1_says_why_and_force_applies_it(celery_worker, conn, tenant):
    """The session's worker is unsigned: the CLI and any producer share the ``unsigned`` sender, so a
    change a minute ahead (within the skew) keeps the operator's next `acl set` stale until --force."""
    put_document(tenant, "bonus.md", [TEXT], acl=["staff", "exec"])
    ahead = {
        "tenant": tenant,
        "doc_id": "bonus.md",
        "acl": ["staff", "exec"],
        "ts": time.time() + 60,
        "producer": "operator",
    }
    assert _run("ragline.acl.sync", {"items": [ahead]}, "unsigned")["documents_updated"] == 1
    conn.commit()
    run = _cli("acl", "set", "bonus.md", "--tenant", tenant, "--acl", "exec")
    assert run.exit_code == 1, run.output
    assert "ignored: tenant" in run.output and "--force applies it anyway" in run.output
    assert "'unsigned/operator:ts'" in run.output and _staff_sees(tenant)
    forced = _cli("acl", "set", "bonus.md", "--tenant", tenant, "--acl", "exec", "--force")
    assert forced.exit_code == 0 and "1 forced" in forced.output, forced.output
    assert acl_of(conn, tenant, "bonus.md")[0] == ["exec"] and not _staff_sees(tenant)
    far = _cli("acl", "set", "bonus.md", "--tenant", tenant, "--acl", "staff", "--version", FAR)
    assert far.exit_code == 2 and "ahead of the server's clock" in far.output, far.output
    assert acl_of(conn, tenant, "bonus.md")[0] == ["exec"]
