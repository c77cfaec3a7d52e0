"""Collect files and enqueue one ingestion task per document, under a job."""

from __future__ import annotations

from pathlib import Path

from ingest.parse import SUPPORTED
from shared import db, jobs
from shared.contracts import TASK_INGEST_DOCUMENT

SUFFIXES = set(SUPPORTED)


def collect_files(paths: list[Path]) -> list[tuple[Path, str]]:
    """(file, doc_id) pairs; doc_id is the path relative to the folder given, so it is stable."""
    out: list[tuple[Path, str]] = []
    for p in paths:
        p = p.resolve()
        if p.is_file():
            out.append((p, p.name))
            continue
        for f in sorted(p.rglob("*")):
            if f.is_file() and f.suffix.lower() in SUFFIXES:
                out.append((f, f.relative_to(p).as_posix()))
    return out


def document_version(path: Path) -> int:
    st = path.stat()
    return st.st_mtime_ns


def enqueue_files(files: list[tuple[Path, str]], tenant: str, acl: list[str]) -> str:
    from shared.celery_app import app

    with db.connection() as conn:
        job_id = jobs.create_job(conn, "ingest", tenant, [d for _, d in files], {"files": len(files)})
    for path, doc_id in files:
        payload = {"tenant": tenant, "doc_id": doc_id, "uri": str(path), "path": doc_id, "acl": acl,
                   "version": document_version(path), "job_id": job_id}
        app.send_task(TASK_INGEST_DOCUMENT, args=[payload])
    return job_id
