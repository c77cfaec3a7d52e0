"""The walking skeleton end to end: a folder of Markdown through the ingest queue, an answer through
the query queue, on real Postgres, Redis and a Celery worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragline.ingest.enqueue import default_source_name
from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT, TASK_QUERY_ASK, TASK_QUERY_RETRIEVE
from ragline.shared.worker import jobs

DOCS = {
    "queues.md": "# Очереди\n\nragline использует очереди ingest и query. Пул запросов работает отдельно "
    "от индексации, поэтому ответы не ждут загрузку документов.\n\n## Flower\n\n"
    "Flower показывает задачи и воркеры.\n",
    "security.md": "# Security\n\nTenant and ACL filters live in the SQL WHERE clause. "
    "An empty group list returns nothing.\n",
}


def _wait_job(job_id: str, timeout: float = 120) -> dict:
    summary = jobs.wait_for_job(job_id, timeout, poll_s=0.2)
    assert summary["state"] not in jobs.ACTIVE_STATES, f"job {job_id} still running: {summary}"
    return summary


@pytest.fixture()
def docs_dir(tmp_path: Path) -> Path:
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_ingest_folder_and_ask_with_citations(celery_worker, docs_dir, tenant):
    from ragline.ingest.enqueue import collect_files, enqueue_files
    from ragline.shared.worker.celery_app import app

    grant_roots(tenant, [docs_dir])  # what `ragline ingest` does before it enqueues
    job = enqueue_files(collect_files([docs_dir]), tenant=tenant, acl=["staff"])
    summary = _wait_job(job)
    assert summary["state"] == "succeeded", summary
    assert summary["documents"] == 2 and summary["chunks"] >= 3

    res = app.send_task(
        TASK_QUERY_ASK,
        args=[{"query": "Какие очереди использует ragline?", "tenant": tenant, "groups": ["staff"]}],
    ).get(timeout=60)
    assert "ingest" in res["answer"] and "[1]" in res["answer"]
    assert res["citations"][0]["doc_id"] == f"{default_source_name(docs_dir)}/queues.md"
    assert res["citations"][0]["heading"] == "Очереди"
    assert {"retrieve", "generate", "total"} <= set(res["timings_ms"])

    # the same question from a caller without the group gets nothing
    denied = app.send_task(
        TASK_QUERY_ASK,
        args=[{"query": "Какие очереди использует ragline?", "tenant": tenant, "groups": ["outsiders"]}],
    ).get(timeout=60)
    assert denied["no_answer"] and denied["citations"] == []

    # a second ingest of the same folder embeds nothing and skips both documents
    again = _wait_job(enqueue_files(collect_files([docs_dir]), tenant=tenant, acl=["staff"]))
    assert again["skipped_unchanged"] == 2 and again["embedded"] == 0


def test_search_through_query_queue_is_tenant_scoped(celery_worker, docs_dir, tenant):
    from ragline.ingest.enqueue import collect_files, enqueue_files
    from ragline.shared.worker.celery_app import app

    grant_roots(tenant, [docs_dir])
    _wait_job(enqueue_files(collect_files([docs_dir]), tenant=tenant, acl=["g"]))
    mine = app.send_task(
        TASK_QUERY_RETRIEVE, args=[{"query": "ACL filters", "tenant": tenant, "groups": ["g"]}]
    ).get(timeout=60)
    assert mine["hits"] and mine["hits"][0]["doc_id"] == f"{default_source_name(docs_dir)}/security.md"
    other = app.send_task(
        TASK_QUERY_RETRIEVE, args=[{"query": "ACL filters", "tenant": tenant + "-other", "groups": ["g"]}]
    ).get(timeout=60)
    assert other["hits"] == []


def test_malformed_payload_gets_structured_error(celery_worker):
    from ragline.shared.worker.celery_app import app

    res = app.send_task(TASK_INGEST_DOCUMENT, args=[{"tenant": 5}]).get(timeout=30)
    assert res["ok"] is False and res["error"] == "invalid payload"
    res = app.send_task(TASK_QUERY_ASK, args=[{"query": "x" * 10_000, "tenant": "t", "groups": ["g"]}]).get(
        timeout=30
    )
    assert res["ok"] is False
