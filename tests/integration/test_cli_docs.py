"""`ragline docs list|show|delete` and `ragline job`: managing what is indexed from the command line,
with the session's in-process worker consuming the ingest tasks. Deleting goes through the delete
path of events (tombstone, versions), so it stays ordered against late events and re-ingests."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragline.ingest.enqueue import default_source_name
from ragline.ingest.events import handle_event
from ragline.shared.sdk.contracts import IngestEvent, SearchRequest
from tests.loopback import loopback_voyage

ISO_UTC = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"


@pytest.fixture()
def voyage(use_settings):
    with loopback_voyage(use_settings) as srv:
        yield srv


def _cli(*args: str, input: str | None = None):
    from ragline.cli import app as cli

    return CliRunner().invoke(cli, list(args), input=input, env={"COLUMNS": "200"})


def _json(run) -> dict:
    return json.loads(run.stdout.strip().splitlines()[-1])


def _kb(root: Path) -> Path:
    folder = root / "kb"
    (folder / "guide").mkdir(parents=True)
    (folder / "leave.md").write_text("# Отпуск\n\nОтпуск согласует отдел кадров заранее.\n", encoding="utf-8")
    (folder / "vpn.md").write_text("# VPN\n\nVPN настраивает служба поддержки за день.\n", encoding="utf-8")
    (folder / "guide" / "start.md").write_text(
        "# Начало\n\nНовый сотрудник получает ноутбук и пропуск.\n", encoding="utf-8"
    )
    return folder


def _ingest(folder: Path, tenant: str, acl: str = "staff") -> dict:
    run = _cli("ingest", str(folder), "--tenant", tenant, "--acl", acl, "--wait", "--json")
    assert run.exit_code == 0, run.output
    return _json(run)


def _chunks(conn, tenant: str, doc_id: str) -> int:
    return conn.execute(
        "SELECT count(*) AS n FROM chunks WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
    ).fetchone()["n"]


def test_list_pages_and_filters_a_tenants_documents(celery_worker, voyage, tenant, tmp_path):
    folder = _kb(tmp_path)
    _ingest(folder, tenant)
    src = default_source_name(folder)
    ids = [f"{src}/guide/start.md", f"{src}/leave.md", f"{src}/vpn.md"]

    everything = _cli("docs", "list", "--tenant", tenant, "--json")
    assert everything.exit_code == 0, everything.output
    page = _json(everything)
    assert [d["doc_id"] for d in page["documents"]] == ids and page["total"] == 3
    assert page["next_after"] is None
    for d in page["documents"]:
        assert (d["status"], d["acl"], d["source"]) == ("ready", ["staff"], src) and d["chunks"] >= 1
        assert datetime.strptime(d["updated_at"], "%Y-%m-%dT%H:%M:%SZ")  # ISO 8601, UTC

    first = _json(_cli("docs", "list", "--tenant", tenant, "--limit", "2", "--json"))
    assert [d["doc_id"] for d in first["documents"]] == ids[:2] and first["next_after"] == ids[1]
    rest = _json(_cli("docs", "list", "--tenant", tenant, "--limit", "2", "--after", ids[1], "--json"))
    assert [d["doc_id"] for d in rest["documents"]] == ids[2:] and rest["next_after"] is None

    guide = _json(_cli("docs", "list", "--tenant", tenant, "--prefix", f"{src}/guide/", "--json"))
    assert [d["doc_id"] for d in guide["documents"]] == ids[:1] and guide["total"] == 1

    readable = _cli("docs", "list", "--tenant", tenant, "--limit", "2")
    assert readable.exit_code == 0 and ids[0] in readable.stdout and ids[2] not in readable.stdout
    assert f"2 documents of 3; next page: --after '{ids[1]}'" in readable.stdout
    assert "{" not in readable.stdout and "staff" in readable.stdout

    typo = _cli("docs", "list", "--tenant", tenant + "-typo")
    assert typo.exit_code == 1 and f"not found: tenant '{tenant}-typo' has no documents" in typo.output
    # an empty listing of a known tenant is an answer (exit 0), in every form a filter takes
    nothing = _cli("docs", "list", "--tenant", tenant, "--prefix", "nope/")
    assert nothing.exit_code == 0 and "starts with 'nope/'" in nothing.output, nothing.output
    no_failed = _cli("docs", "list", "--tenant", tenant, "--status", "failed")
    assert no_failed.exit_code == 0 and "with status failed" in no_failed.output, no_failed.output
    no_failed_json = _cli("docs", "list", "--tenant", tenant, "--status", "failed", "--json")
    assert no_failed_json.exit_code == 0, no_failed_json.output
    assert (_json(no_failed_json)["total"], _json(no_failed_json)["documents"]) == (0, [])
    bad = _cli("docs", "list", "--tenant", tenant, "--status", "gone")
    assert bad.exit_code == 2


def test_show_a_document_and_its_job_after_a_permission_change(celery_worker, voyage, tenant, tmp_path):
    folder = _kb(tmp_path)
    summary = _ingest(folder, tenant)
    doc_id = f"{default_source_name(folder)}/leave.md"

    shown = _json(_cli("docs", "show", doc_id, "--tenant", tenant, "--json"))
    assert (shown["status"], shown["acl"], shown["chunks_stored"]) == (
        "ready",
        ["staff"],
        shown["chunk_count"],
    )
    assert shown["chunks_stored"] >= 1 and len(shown["content_hash"]) == 64
    assert shown["metadata"]["source"] == default_source_name(folder)
    assert shown["source_uri"] == str((folder / "leave.md").resolve())
    assert shown["version"] == (folder / "leave.md").stat().st_mtime_ns  # the documented unit
    assert shown["last_job"]["job_id"] == summary["job_id"] and shown["last_job"]["state"] == "done"
    assert shown["open_errors"] == [] and shown["updated_at"].endswith("Z")

    when = "2026-11-30T15:00:00+03:00"  # a version may be a time: Unix nanoseconds, like the file's
    assert (
        _cli("acl", "set", doc_id, "--tenant", tenant, "--acl", "hr,board", "--version", when).exit_code == 0
    )
    assert _json(_cli("docs", "show", doc_id, "--tenant", tenant, "--json"))["acl_versions"] == {
        "unsigned/operator": 1_796_040_000_000_000_000  # kept under the verified sender, then the name
    }
    naive = _cli("acl", "set", doc_id, "--tenant", tenant, "--acl", "x", "--version", "2026-11-30T15:00:00")
    assert naive.exit_code == 2 and "UTC offset" in naive.output
    readable = _cli("docs", "show", doc_id, "--tenant", tenant)
    assert readable.exit_code == 0, readable.output
    for text in ("groups (acl)", "board, hr", "ingest asked for", "staff", summary["job_id"], doc_id):
        assert text in readable.stdout, text
    assert "{" not in readable.stdout and "datetime" not in readable.stdout
    mtime = datetime.fromtimestamp((folder / "leave.md").stat().st_mtime_ns // 10**9, UTC)
    assert mtime.isoformat(timespec="seconds").replace("+00:00", "Z") in readable.stdout  # version as a time

    missing = _cli("docs", "show", "nope.md", "--tenant", tenant)
    assert missing.exit_code == 1 and "not found" in missing.output and "nope.md" in missing.output

    job = _cli("job", summary["job_id"][:8])
    assert job.exit_code == 0, job.output
    assert f"job {summary['job_id']}: succeeded" in job.stdout
    assert (
        "3 documents: 3 stored, 0 unchanged, 0 failed" in job.stdout and f"for tenant {tenant}" in job.stdout
    )
    as_json = _json(_cli("job", summary["job_id"], "--json"))
    assert (as_json["state"], as_json["documents"], as_json["kind"], as_json["errors"]) == (
        "succeeded",
        3,
        "ingest",
        [],
    )
    assert as_json["created_at"].endswith("Z") and as_json["finished_at"].endswith("Z")
    unknown = _cli("job", "00000000-0000-0000-0000-000000000000")
    assert unknown.exit_code == 1 and "not found" in unknown.output


def test_delete_removes_chunks_keeps_order_and_reports_unknown_ids(
    celery_worker, voyage, conn, tenant, tmp_path
):
    from ragline.query.service import search

    folder = _kb(tmp_path)
    _ingest(folder, tenant)
    src = default_source_name(folder)
    leave, vpn, start = f"{src}/leave.md", f"{src}/vpn.md", f"{src}/guide/start.md"
    stored_version = (folder / "leave.md").stat().st_mtime_ns

    chunks = _chunks(conn, tenant, leave)
    run = _cli("docs", "delete", leave, "--tenant", tenant)
    assert run.exit_code == 0, run.output
    assert f"deleted 1 document ({chunks} chunk" in run.stdout and chunks >= 1
    assert _chunks(conn, tenant, leave) == 0
    hits = search(
        SearchRequest(query="отпуск отдел кадров", tenant=tenant, groups=["staff"], mode="lexical")
    ).hits
    assert leave not in {h.doc_id for h in hits}
    listed = _json(_cli("docs", "list", "--tenant", tenant, "--json"))
    assert leave not in {d["doc_id"] for d in listed["documents"]}
    tomb = _json(_cli("docs", "list", "--tenant", tenant, "--status", "deleted", "--json"))
    assert [d["doc_id"] for d in tomb["documents"]] == [leave] and tomb["documents"][0][
        "version"
    ] == stored_version

    # a redelivered older upsert stays out (the tombstone keeps the stored version) and says why
    late = handle_event(
        conn,
        IngestEvent(
            type="upsert",
            tenant=tenant,
            doc_id=leave,
            uri=str(folder / "leave.md"),
            version=stored_version - 1,
        ),
        lambda *a: pytest.fail("a stale upsert must not be enqueued"),
    )
    conn.commit()
    assert (late.outcome, late.stored_version) == ("ignored_stale", stored_version)

    again = _cli("docs", "delete", leave, "nope.md", vpn, "--tenant", tenant, "--json")
    assert again.exit_code == 1
    out = _json(again)
    assert out["not_found"] == [leave, "nope.md"] and [d["doc_id"] for d in out["deleted"]] == [vpn]

    # by prefix: asks first; "no" deletes nothing
    no = _cli("docs", "delete", "--prefix", f"{src}/guide/", "--tenant", tenant, input="n\n")
    assert no.exit_code == 1 and "delete 1 document" in no.output and _chunks(conn, tenant, start) > 0
    yes = _cli("docs", "delete", "--prefix", f"{src}/guide/", "--tenant", tenant, "--yes")
    assert yes.exit_code == 0 and _chunks(conn, tenant, start) == 0
    assert _cli("docs", "delete", "--tenant", tenant).exit_code == 2  # neither ids nor --prefix

    # ingesting the unchanged files again brings them back, with their chunks and groups
    back = _ingest(folder, tenant, acl="staff")
    assert back["failed"] == 0 and _chunks(conn, tenant, leave) > 0 and _chunks(conn, tenant, start) > 0


def test_a_delete_event_takes_an_iso_time_as_its_version(celery_worker, voyage, conn, tenant, tmp_path):
    """`ragline ingest` stores a file's mtime in nanoseconds as the version; a producer deleting the
    document had to guess that unit (a version in seconds was silently ignored as stale)."""
    folder = _kb(tmp_path)
    _ingest(folder, tenant)
    doc_id = f"{default_source_name(folder)}/vpn.md"
    stored = (folder / "vpn.md").stat().st_mtime_ns

    in_seconds = handle_event(
        conn, IngestEvent(type="delete", tenant=tenant, doc_id=doc_id, version=int(time.time())), None
    )
    conn.commit()
    assert (in_seconds.outcome, in_seconds.stored_version) == ("ignored_stale", stored)  # now it says why
    now = datetime.now(UTC).isoformat()
    deleted = handle_event(conn, IngestEvent(type="delete", tenant=tenant, doc_id=doc_id, version=now), None)
    conn.commit()
    assert deleted.outcome == "deleted" and deleted.chunks_deleted >= 1 and _chunks(conn, tenant, doc_id) == 0


def test_a_documents_last_job_is_found_through_its_index(conn, tenant):
    """`docs show` reads one document's jobs, not every job's rows (migration 0011)."""
    from ragline.ingest.catalog import LAST_JOB_SQL

    conn.execute("SET LOCAL enable_seqscan = off")  # an empty test table must not hide a full scan
    plan = "\n".join(
        r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + LAST_JOB_SQL, (tenant, "a.md")).fetchall()
    )
    assert "job_documents_by_document" in plan, plan
