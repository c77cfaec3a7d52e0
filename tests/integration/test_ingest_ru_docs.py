"""Ingesting ru-docs (137 md/html/pdf/docx files) twice through the Celery ingest tasks gives
identical chunk rows and ``embedded: 0`` the second time.

Embedding uses the ``voyage`` provider against the loopback server (hashed trigram vectors), so the
test checks ingestion, not the local model's speed on a few thousand chunks.
"""

from __future__ import annotations

import pytest

from ragline.shared.worker import db
from tests.conftest import DATASETS
from tests.integration.test_ingest import chunk_rows, wait_job
from tests.loopback import loopback_voyage

RU_DOCS = DATASETS / "ru-docs"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not RU_DOCS.is_dir(), reason="ru-docs dataset not present"),
]


def test_ru_docs_twice_identical_rows_and_nothing_embedded_again(celery_worker, use_settings, tenant):
    from ragline.ingest.enqueue import collect_files, enqueue_files
    from ragline.ingest.roots import grant_roots

    files = [f for f in collect_files([RU_DOCS]) if f.path.name != "README.md"]
    assert len(files) == 137
    with loopback_voyage(use_settings) as srv:
        grant_roots(tenant, [RU_DOCS])  # what `ragline ingest` does before it enqueues
        first = wait_job(enqueue_files(files, tenant=tenant, acl=["staff"]), timeout=900)
        rows = chunk_rows(tenant)
        sent_first = srv.stats.texts_embedded
        second = wait_job(enqueue_files(files, tenant=tenant, acl=["staff"]), timeout=900)
        sent_second = srv.stats.texts_embedded - sent_first
    print(
        {k: first[k] for k in ("documents", "chunks", "embedded", "failed")},
        "second:",
        {k: second[k] for k in ("skipped_unchanged", "embedded")},
        "batches:",
        len(srv.stats.bodies),
    )
    assert first["state"] == "succeeded" and first["failed"] == 0, first["errors"]
    assert first["documents"] == 137 and first["chunks"] == len(rows) > 1000
    assert first["embedded"] == sent_first  # `embedded` counts texts actually sent to the embedder
    assert max(b_len for b_len in (len(b["input"]) for b in srv.stats.bodies if "input" in b)) == 128
    assert (second["skipped_unchanged"], second["embedded"], sent_second) == (137, 0, 0)
    assert chunk_rows(tenant) == rows

    # every file has chunks with heading paths; the ASVS requirement 4.1.1 is in all three formats
    with db.connection() as c:
        per_doc = c.execute(
            "SELECT doc_id, count(*) AS n, count(*) FILTER (WHERE heading_path <> '') AS with_path FROM chunks"
            " WHERE tenant = %s GROUP BY doc_id",
            (tenant,),
        ).fetchall()
        hits = c.execute(
            "SELECT doc_id, heading_path, page, metadata->>'kind' AS kind FROM chunks WHERE tenant = %s AND"
            " regexp_replace(content, '\\s+', ' ', 'g') LIKE %s ORDER BY doc_id",
            (tenant, "%применяет правила контроля доступа на уровне доверенного сервиса%"),
        ).fetchall()
    assert len(per_doc) == 137 and all(r["with_path"] >= r["n"] - 1 and r["with_path"] > 0 for r in per_doc)
    assert {h["doc_id"].rsplit(".", 1)[1] for h in hits} == {"md", "pdf", "docx"}
    assert {h["heading_path"] for h in hits} == {"V4 Контроль доступа › V4.1 Базовые принципы"}
    assert [h["page"] for h in hits if h["doc_id"].endswith(".pdf")] == [38]
