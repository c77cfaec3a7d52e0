"""Document lifecycle on the embedded stack: delete events, tombstones against late upserts, job
heartbeats and stuck detection, cancel, ``ragline status`` / ``errors``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from ragline.ingest.events import handle_event
from ragline.shared.sdk.contracts import IngestEvent
from ragline.shared.sdk.names import TASK_INGEST_EVENT
from ragline.shared.worker import jobs
from tests.integration.lifecycle_helpers import put_document


def _chunks(conn, tenant, doc_id) -> int:
    return conn.execute(
        "SELECT count(*) AS n FROM chunks WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
    ).fetchone()["n"]


def _doc(conn, tenant, doc_id) -> dict | None:
    return conn.execute(
        "SELECT status, version, chunk_count FROM documents WHERE tenant = %s AND doc_id = %s",
        (tenant, doc_id),
    ).fetchone()


def test_delete_event_removes_every_chunk(celery_worker, conn, tenant):
    from ragline.shared.worker.celery_app import app

    put_document(tenant, "big", [f"абзац {i} о бюджете" for i in range(30)], acl=["g"], version=3)
    put_document(tenant, "other", ["соседний документ"], acl=["g"], version=1)
    assert _chunks(conn, tenant, "big") == 30
    res = app.send_task(
        TASK_INGEST_EVENT, args=[{"type": "delete", "tenant": tenant, "doc_id": "big", "version": 4}]
    ).get(timeout=30)
    assert res["outcome"] == "deleted" and res["chunks_deleted"] == 30
    conn.rollback()
    assert _chunks(conn, tenant, "big") == 0
    assert _doc(conn, tenant, "big")["status"] == "deleted"
    assert _chunks(conn, tenant, "other") == 1  # nothing else touched
    from ragline.query.service import search
    from ragline.shared.sdk.contracts import SearchRequest

    hits = search(SearchRequest(query="бюджете", tenant=tenant, groups=["g"], mode="lexical")).hits
    assert "big" not in {h.doc_id for h in hits}
    # the same delete again is harmless
    again = app.send_task(
        TASK_INGEST_EVENT, args=[{"type": "delete", "tenant": tenant, "doc_id": "big", "version": 4}]
    ).get(timeout=30)
    assert again["outcome"] == "ignored_duplicate"


def test_out_of_order_events_are_harmless(conn, tenant):
    sent: list[dict] = []

    def send(name, payload):
        sent.append(payload)
        return f"task-{len(sent)}"

    put_document(tenant, "d", ["версия пять"], acl=["g"], version=5)
    old_delete = handle_event(conn, IngestEvent(type="delete", tenant=tenant, doc_id="d", version=4), send)
    assert old_delete.outcome == "ignored_stale" and _chunks(conn, tenant, "d") == 1
    dup = handle_event(
        conn, IngestEvent(type="upsert", tenant=tenant, doc_id="d", uri="/x/d.md", version=5), send
    )
    old = handle_event(
        conn, IngestEvent(type="upsert", tenant=tenant, doc_id="d", uri="/x/d.md", version=3), send
    )
    assert (dup.outcome, old.outcome, sent) == ("ignored_duplicate", "ignored_stale", [])
    new = handle_event(
        conn, IngestEvent(type="upsert", tenant=tenant, doc_id="d", uri="/x/d.md", version=6), send
    )
    assert new.outcome == "enqueued" and sent[0]["version"] == 6 and sent[0]["uri"] == "/x/d.md"
    assert sent[0]["acl"] == ["g"]  # no 'acl' in the event: the current permissions are kept
    # delete at 7, then the ingest of version 6 lands late: the tombstone makes it stale
    assert (
        handle_event(conn, IngestEvent(type="delete", tenant=tenant, doc_id="d", version=7), send).outcome
        == "deleted"
    )
    conn.commit()
    assert put_document(tenant, "d", ["версия шесть"], acl=["g"], version=6) == "stale"
    assert _chunks(conn, tenant, "d") == 0
    late = handle_event(
        conn, IngestEvent(type="upsert", tenant=tenant, doc_id="d", uri="/x/d.md", version=6), send
    )
    assert late.outcome == "ignored_stale" and len(sent) == 1
    # an acl event goes through the same last-writer-wins sync
    acl_new = handle_event(
        conn, IngestEvent(type="acl", tenant=tenant, doc_id="d", version=9, acl=["h"]), send
    )
    acl_old = handle_event(
        conn, IngestEvent(type="acl", tenant=tenant, doc_id="d", version=8, acl=["x"]), send
    )
    assert (acl_new.outcome, acl_old.outcome) == ("acl_applied", "ignored_stale")


def test_delete_before_the_document_exists_blocks_the_older_upsert(conn, tenant):
    out = handle_event(
        conn, IngestEvent(type="delete", tenant=tenant, doc_id="ghost", version=10), lambda *a: "x"
    )
    assert out.outcome == "deleted"
    conn.commit()
    assert put_document(tenant, "ghost", ["старое"], acl=["g"], version=9) == "stale"
    assert put_document(tenant, "ghost", ["новое"], acl=["g"], version=11) == "stored"
    assert _doc(conn, tenant, "ghost")["status"] == "ready"


_HEARTBEATER = """
import sys, time
from ragline.shared.worker import db, jobs
with db.connection() as conn:
    job = jobs.create_job(conn, "reembed", sys.argv[1], [], {})
print(job, flush=True)
while True:
    with db.connection() as conn:
        jobs.heartbeat(conn, job, progress=True)
    time.sleep(0.2)
"""


def test_killed_job_is_detected_as_stuck(celery_worker, conn, tenant):
    """A real process runs a job and heartbeats; it is killed with SIGKILL; the beat task marks the job."""
    from ragline.shared.sdk.names import TASK_STUCK_JOBS
    from ragline.shared.worker.celery_app import app

    env = {**os.environ}
    proc = subprocess.Popen(
        [sys.executable, "-c", _HEARTBEATER, tenant],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=os.getcwd(),
    )
    try:
        job_id = proc.stdout.readline().strip()
        time.sleep(1.0)
        # alive and heartbeating: not stuck at a 1 s threshold
        res = app.send_task(TASK_STUCK_JOBS, args=[{"older_than_s": 1.0}]).get(timeout=30)
        assert job_id not in {j["id"] for j in res["marked"]}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert jobs.job_state(conn, job_id) == "running"
    conn.rollback()
    time.sleep(1.5)
    res = app.send_task(TASK_STUCK_JOBS, args=[{"older_than_s": 1.0}]).get(timeout=30)
    assert job_id in {j["id"] for j in res["marked"]}
    row = conn.execute("SELECT state, error, finished_at FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert row["state"] == "failed" and row["error"].startswith("stuck: no heartbeat") and row["finished_at"]
    assert not jobs.heartbeat(conn, job_id)  # a late heartbeat cannot revive it


def test_cancel_stops_heartbeats_and_status_shows_jobs_queues_errors(conn, tenant):
    from typer.testing import CliRunner

    from ragline.cli import app as cli
    from ragline.ingest import store

    job_id = jobs.create_job(conn, "ingest", tenant, ["a", "b"], {})
    store.mark_failed(conn, tenant, "broken.md", "/nowhere/broken.md", "parse", "parse: bad table", job_id)
    conn.commit()
    out = CliRunner().invoke(cli, ["status", "--json"])
    # the session's stack has Postgres and Redis but none of ragline up's processes: partly running
    assert out.exit_code == 1, out.output
    info = json.loads(out.stdout)
    assert set(info["queues"]) == {"ingest", "query", "acl", "maintenance"}
    assert all(isinstance(n, int) for n in info["queues"].values())
    assert job_id in {j["id"] for j in info["running_jobs"]}
    assert any(e["doc_id"] == "broken.md" for e in info["recent_errors"])
    human = CliRunner().invoke(cli, ["status"], env={"COLUMNS": "250"})
    assert human.exit_code == 1 and "queue acl" in human.stdout and "broken.md" in human.stdout
    errs = CliRunner().invoke(cli, ["errors", "--tenant", tenant, "--json"])
    assert [e["doc_id"] for e in json.loads(errs.stdout)] == ["broken.md"]

    assert CliRunner().invoke(cli, ["cancel", job_id]).exit_code == 0
    assert jobs.job_state(conn, job_id) == "cancelled" and not jobs.heartbeat(conn, job_id)
    assert CliRunner().invoke(cli, ["cancel", job_id]).exit_code == 1


def test_stuck_job_that_progresses_after_all_runs_again(conn, tenant):
    job_id = jobs.create_job(conn, "ingest", tenant, ["a", "b"], {})
    conn.execute("UPDATE jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = %s", (job_id,))
    assert job_id in {j["id"] for j in jobs.mark_stuck(conn, 60)}
    assert jobs.job_state(conn, job_id) == "failed"
    jobs.record_document(conn, job_id, tenant, "a", "done", 1, 1)
    assert jobs.job_state(conn, job_id) == "running"
    jobs.record_document(conn, job_id, tenant, "b", "failed", error="parse: x")
    s = jobs.job_summary(conn, job_id)
    assert (s["state"], s["done"], s["failed"]) == ("completed_with_errors", 1, 1)


def test_documents_of_a_cancelled_job_are_skipped(celery_worker, conn, tenant):
    from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT
    from ragline.shared.worker.celery_app import app

    job_id = jobs.create_job(conn, "ingest", tenant, ["x.md"], {})
    assert jobs.cancel_job(conn, job_id)
    conn.commit()
    res = app.send_task(
        TASK_INGEST_DOCUMENT,
        args=[
            {
                "tenant": tenant,
                "doc_id": "x.md",
                "content": "# X\n\nтекст",
                "fmt": "md",
                "acl": ["g"],
                "job_id": job_id,
            }
        ],
    ).get(timeout=60)
    assert res["status"] == "cancelled"
    assert _doc(conn, tenant, "x.md") is None and jobs.job_state(conn, job_id) == "cancelled"


def test_purge_removes_old_tombstones_and_finished_jobs_only(celery_worker, conn, tenant):
    from ragline.shared.sdk.names import TASK_PURGE
    from ragline.shared.worker.celery_app import app

    for doc_id in ("old-deleted", "fresh-deleted", "old-live"):
        put_document(tenant, doc_id, [f"текст {doc_id}"], acl=["g"], version=1)
    for doc_id in ("old-deleted", "fresh-deleted"):
        handle_event(
            conn, IngestEvent(type="delete", tenant=tenant, doc_id=doc_id, version=2), lambda *_: "x"
        )
    done = jobs.record_job(conn, "acl_sync", tenant, {"items": 1}, total=1)
    running = conn.execute(
        "INSERT INTO jobs (kind, tenant, state) VALUES ('reindex', %s, 'running') RETURNING id", (tenant,)
    ).fetchone()["id"]
    # forty days pass for everything but one tombstone
    conn.execute(
        "UPDATE documents SET updated_at = now() - interval '40 days' WHERE tenant = %s AND doc_id <> %s",
        (tenant, "fresh-deleted"),
    )
    conn.execute(
        "UPDATE jobs SET created_at = now() - interval '40 days', finished_at = now() - interval '40 days'"
        " WHERE tenant = %s",
        (tenant,),
    )
    conn.commit()
    res = app.send_task(TASK_PURGE, args=[None]).get(timeout=30)
    assert res["tombstones"] >= 1 and res["jobs"] >= 1
    left = {
        r["doc_id"]: r["status"]
        for r in conn.execute("SELECT doc_id, status FROM documents WHERE tenant = %s", (tenant,)).fetchall()
    }
    assert left == {"fresh-deleted": "deleted", "old-live": "ready"}
    ids = {str(r["id"]) for r in conn.execute("SELECT id FROM jobs WHERE tenant = %s", (tenant,)).fetchall()}
    assert ids == {str(running)} and str(done) not in ids
    assert _chunks(conn, tenant, "old-live") == 1
