"""Full reindex, events, model change and retries through real workers, with the voyage embedder
pointed at the loopback server (texts are counted on the server side)."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

from typer.testing import CliRunner

from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.sdk.names import TASK_INGEST_EVENT, TASK_INGEST_REEMBED
from ragline.shared.worker import db
from tests.integration.lifecycle_helpers import MarkdownSite, wait_job

DOCS = {
    "alpha.md": "# Альфа\n\nПервый документ об очередях ingest и query.\n\n## Детали\n\nПул запросов отдельно.\n",
    "beta.md": "# Бета\n\nВторой документ о правах доступа и группах.\n",
    "sub/gamma.md": "# Гамма\n\nТретий документ о переиндексации по расписанию.\n",
}


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    for name, text in DOCS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def _count(tenant: str, sql_where: str = "true", *args) -> int:
    with db.connection() as c:
        return c.execute(
            f"SELECT count(*) AS n FROM chunks WHERE tenant = %s AND {sql_where}", (tenant, *args)
        ).fetchone()["n"]


def _reindex(name: str) -> dict:
    from ragline.ingest.control.tasks import run_reindex

    out = run_reindex([name])
    if out["job_id"]:
        out["summary"] = wait_job(out["job_id"])
    return out


def test_folder_reindex_lifecycle(celery_worker, voyage, loopback, tenant, tmp_path):
    root = _folder(tmp_path)
    name = f"{tenant}-wiki"
    voyage(
        embed_model="voyage-reindex",
        lifecycle_sources=json.dumps(
            [
                {
                    "name": name,
                    "kind": "folder",
                    "tenant": tenant,
                    "acl": ["staff"],
                    "path": str(root),
                    "glob": "**/*.md",
                }
            ]
        ),
    )

    first = _reindex(name)
    assert (first["new"], first["changed"], first["pruned"]) == (3, 0, 0)
    assert first["summary"]["state"] == "succeeded" and first["summary"]["done"] == 3
    chunks = _count(tenant)
    assert chunks >= 3 and loopback.stats.texts_embedded == chunks

    # nothing changed: nothing enqueued, zero texts (and zero requests) to the embedder
    loopback.reset_stats()
    again = _reindex(name)
    assert (again["unchanged"], again["enqueued"], again["pruned"]) == (3, 0, 0)
    assert again["state"] == "succeeded" and loopback.stats.requests == 0

    # touched (new mtime, same bytes): the content hash breaks the tie, still zero texts
    os.utime(root / "beta.md", ns=(time.time_ns(), time.time_ns()))
    touched = _reindex(name)
    assert (touched["touched"], touched["enqueued"]) == (1, 0) and loopback.stats.texts_embedded == 0
    assert _reindex(name)["unchanged"] == 3  # the refreshed fingerprint sticks

    # one file edited: only that document is ingested again
    (root / "alpha.md").write_text(
        DOCS["alpha.md"] + "\n## Новое\n\nДобавленный раздел про beat.\n", encoding="utf-8"
    )
    edited = _reindex(name)
    assert (edited["changed"], edited["enqueued"], edited["unchanged"]) == (1, 1, 2)
    assert edited["summary"]["done"] == 1 and 0 < loopback.stats.texts_embedded <= _count(
        tenant, "doc_id = %s", f"{name}/alpha.md"
    )

    # a file removed from the folder is gone after the reindex (CLI, --wait --json)
    (root / "sub" / "gamma.md").unlink()
    from ragline.cli import app as cli

    run = CliRunner().invoke(cli, ["reindex", "--source", name, "--wait", "--json"])
    assert run.exit_code == 0, run.output
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["pruned"] == 1 and out["state"] == "succeeded"
    assert _count(tenant, "doc_id = %s", f"{name}/sub/gamma.md") == 0
    from ragline.query.service import search

    hits = search(
        SearchRequest(query="переиндексации расписанию", tenant=tenant, groups=["staff"], mode="lexical")
    ).hits
    assert f"{name}/sub/gamma.md" not in {h.doc_id for h in hits}
    assert {
        h.doc_id
        for h in search(
            SearchRequest(query="правах доступа", tenant=tenant, groups=["staff"], mode="lexical")
        ).hits
    } == {f"{name}/beta.md"}
    # an unmounted folder prunes nothing
    os.rename(root, tmp_path / "moved")
    gone = _reindex(name)
    assert gone["sources"][name]["error"] and gone["pruned"] == 0 and _count(tenant) > 0


def test_reindex_sends_batch_tasks_whose_chunks_share_embedding_requests(
    celery_worker, voyage, loopback, tenant, tmp_path
):
    """Ten new one-chunk files on two ingest processes: two batch tasks, so two embedding requests
    (one per document before) and every document stored once."""
    from ragline.ingest.control.reindex import reindex
    from ragline.shared.worker.celery_app import app

    root = tmp_path / "many"
    root.mkdir()
    for i in range(10):
        (root / f"doc{i}.md").write_text(
            f"# Документ {i}\n\nКороткий текст номер {i} о пакетной индексации.\n", encoding="utf-8"
        )
    name = f"{tenant}-many"
    voyage(
        embed_model="voyage-batches",
        workers_ingest_concurrency=2,
        lifecycle_sources=json.dumps(
            [
                {
                    "name": name,
                    "kind": "folder",
                    "tenant": tenant,
                    "acl": ["staff"],
                    "path": str(root),
                    "glob": "*.md",
                }
            ]
        ),
    )
    from ragline.ingest.sources import configured_sources
    from ragline.shared.config.settings import get_settings

    sent: list[tuple[str, dict]] = []

    def send(task: str, payload: dict) -> str:
        sent.append((task, payload))
        return app.send_task(task, args=[payload]).id

    with db.connection() as conn:
        out = reindex(conn, configured_sources(get_settings().lifecycle.sources), send)
    summary = wait_job(out["job_id"])
    assert out["new"] == 10 and summary["done"] == 10 and summary["failed"] == 0
    assert [t for t, _ in sent] == ["ragline.ingest.batch"] * 2
    sent_ids = sorted(d["doc_id"] for _, p in sent for d in p["documents"])
    assert sent_ids == sorted(f"{name}/doc{i}.md" for i in range(10))
    assert loopback.stats.requests == 2 and loopback.stats.texts_embedded == _count(tenant) == 10


def test_model_switch_reembeds_every_chunk_exactly_once(celery_worker, voyage, loopback, tenant, tmp_path):
    from ragline.ingest.pipeline import ingest_document
    from ragline.shared.sdk.contracts import IngestRequest

    voyage(embed_model="model-a")
    for i in range(6):
        text = f"# Документ {i}\n\n" + "\n\n".join(
            f"Абзац {i}.{j}: уникальный текст номер {i * 10 + j}." * 3 for j in range(3)
        )
        r = ingest_document(
            IngestRequest(tenant=tenant, doc_id=f"m{i}", content=text, fmt="md", acl=["g"], version=1)
        )
        assert r.status == "stored"
    total = _count(tenant)
    assert total == _count(tenant, "embed_model = 'model-a'") and total >= 6

    voyage(embed_model="model-b", lifecycle_reembed_batch_size=4)  # several batches
    loopback.reset_stats()
    from ragline.shared.worker.celery_app import app

    out = app.send_task(TASK_INGEST_REEMBED, args=[{"tenant": tenant}]).get(timeout=120)
    assert out["state"] == "succeeded" and out["chunks"] == total
    assert loopback.stats.texts_embedded == total  # every chunk exactly once
    assert _count(tenant, "embed_model = 'model-b' AND embedding IS NOT NULL") == total
    with db.connection() as c:
        docs = c.execute("SELECT DISTINCT embed_model FROM documents WHERE tenant = %s", (tenant,)).fetchall()
        job = c.execute("SELECT kind, state, result FROM jobs WHERE id = %s", (out["job_id"],)).fetchone()
    assert [d["embed_model"] for d in docs] == ["model-b"]
    assert job["kind"] == "reembed" and job["state"] == "succeeded" and job["result"]["chunks"] == total
    # nothing left: a second run sends nothing
    loopback.reset_stats()
    assert app.send_task(TASK_INGEST_REEMBED, args=[{"tenant": tenant}]).get(timeout=60)["chunks"] == 0
    assert loopback.stats.texts_embedded == 0
    # and a re-ingest of the same content under model-b is a no-op too
    r = ingest_document(
        IngestRequest(tenant=tenant, doc_id="m5", content=text, fmt="md", acl=["g"], version=1)
    )
    assert loopback.stats.texts_embedded == 0, r


def test_upsert_and_delete_events_through_workers(celery_worker, voyage, tenant, tmp_path):
    from ragline.shared.worker.celery_app import app

    voyage(embed_model="voyage-events")
    f = tmp_path / "note.md"
    f.write_text("# Заметка\n\nСобытие upsert доставило этот документ.\n", encoding="utf-8")
    grant_roots(tenant, [tmp_path])  # the operator's grant: an event's path is read only below it
    ev = {"type": "upsert", "tenant": tenant, "doc_id": "note", "uri": str(f), "version": 2, "acl": ["g"]}
    first = app.send_task(TASK_INGEST_EVENT, args=[ev]).get(timeout=30)
    assert first["outcome"] == "enqueued"
    app.AsyncResult(first["task_id"]).get(timeout=120)
    assert _count(tenant, "doc_id = 'note'") >= 1
    assert app.send_task(TASK_INGEST_EVENT, args=[ev]).get(timeout=30)["outcome"] == "ignored_duplicate"
    gone = app.send_task(TASK_INGEST_EVENT, args=[{**ev, "type": "delete", "version": 3}]).get(timeout=30)
    assert (
        gone["outcome"] == "deleted"
        and gone["chunks_deleted"] >= 1
        and _count(tenant, "doc_id = 'note'") == 0
    )


class _Site(MarkdownSite):
    pages: dict[str, tuple[str, bytes]] = {}


def test_url_list_source_reindex(celery_worker, voyage, loopback, tenant):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    _Site.pages = {
        "/a.md": ('"a1"', "# A\n\nСтраница A про сервер.\n".encode()),
        "/b.md": ('"b1"', "# B\n\nСтраница B про клиента.\n".encode()),
    }
    name = f"{tenant}-site"
    try:
        voyage(
            embed_model="voyage-urls",
            ingest_fetch_allow_private="true",  # the site is on 127.0.0.1: an explicit allowance
            lifecycle_sources=json.dumps(
                [
                    {
                        "name": name,
                        "kind": "urls",
                        "tenant": tenant,
                        "acl": ["web"],
                        "urls": [f"{base}/a.md", f"{base}/b.md"],
                    }
                ]
            ),
        )
        first = _reindex(name)
        assert first["new"] == 2 and first["summary"]["done"] == 2, first
        loopback.reset_stats()
        assert _reindex(name)["unchanged"] == 2 and loopback.stats.requests == 0
        _Site.pages["/a.md"] = ('"a2"', "# A\n\nСтраница A изменилась.\n".encode())
        del _Site.pages["/b.md"]
        after = _reindex(name)
        assert (after["changed"], after["pruned"]) == (1, 1) and after["summary"]["done"] == 1
        assert _count(tenant, "doc_id = %s", f"{base}/b.md") == 0
        assert _count(tenant, "doc_id = %s AND content LIKE %s", f"{base}/a.md", "%изменилась%") == 1
    finally:
        srv.shutdown()
        srv.server_close()


def test_errors_and_retry_failed(celery_worker, voyage, tenant, tmp_path):
    from ragline.cli import app as cli
    from ragline.shared.worker.celery_app import app

    voyage(embed_model="voyage-retry")
    missing = tmp_path / "late.md"
    grant_roots(tenant, [tmp_path])
    from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT

    res = app.send_task(
        TASK_INGEST_DOCUMENT,
        args=[{"tenant": tenant, "doc_id": "late.md", "uri": str(missing), "acl": ["g"], "version": 1}],
    ).get(timeout=60)
    assert res["status"] == "failed"
    errs = json.loads(CliRunner().invoke(cli, ["errors", "--tenant", tenant, "--json"]).stdout)
    assert [e["doc_id"] for e in errs] == ["late.md"]
    # ACL unknown (the document never stored): not retried without --acl
    skipped = json.loads(CliRunner().invoke(cli, ["retry-failed", "--tenant", tenant, "--json"]).stdout)
    assert skipped["requeued"] == 0 and skipped["skipped"][0]["reason"].startswith("ACL unknown")
    missing.write_text("# Поздно\n\nФайл появился позже.\n", encoding="utf-8")
    run = CliRunner().invoke(cli, ["retry-failed", "--tenant", tenant, "--acl", "g", "--wait", "--json"])
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["requeued"] == 1 and out["state"] == "succeeded" and out["done"] == 1
    assert json.loads(CliRunner().invoke(cli, ["errors", "--tenant", tenant, "--json"]).stdout) == []
    assert _count(tenant, "doc_id = 'late.md' AND acl = '{g}'") >= 1
