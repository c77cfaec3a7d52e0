"""Collect files and enqueue them under a job, in batch tasks whose chunks share embedding requests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ragline.ingest.parse import SUPPORTED
from ragline.shared import db, jobs
from ragline.shared.celery_app import app
from ragline.shared.names import TASK_INGEST_BATCH, TASK_INGEST_DOCUMENT
from ragline.shared.settings import get_settings

SUFFIXES = set(SUPPORTED)


def collect_files(paths: list[Path]) -> list[tuple[Path, str]]:
    """(file, doc_id) pairs; doc_id is the path relative to the folder given, so it is stable.

    A doc_id seen twice (a file given again, or the same relative name under two folders) is kept
    once, first one wins: two files under one doc_id would overwrite each other's chunks.
    """
    found: list[tuple[Path, str]] = []
    for p in paths:
        p = p.resolve()
        if p.is_file():
            found.append((p, p.name))
            continue
        for f in sorted(p.rglob("*")):
            if f.is_file() and f.suffix.lower() in SUFFIXES:
                found.append((f, f.relative_to(p).as_posix()))
    seen: set[str] = set()
    out = []
    for f, doc_id in found:
        if doc_id not in seen:
            seen.add(doc_id)
            out.append((f, doc_id))
    return out


def document_version(path: Path) -> int:
    st = path.stat()
    return st.st_mtime_ns


def plan_batches(sizes: list[int], max_docs: int, max_bytes: int) -> list[range]:
    """Consecutive groups of at most ``max_docs`` documents and ``max_bytes`` bytes (a larger file goes
    alone), so one batch task stays well inside the task time limit."""
    groups: list[range] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= max_docs or total + size > max_bytes):
            groups.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        groups.append(range(start, len(sizes)))
    return groups


def send_in_batches(
    payloads: list[dict],
    sizes: list[int],
    send_task: Callable[[str, dict], object],
    batch_docs: int | None = None,
) -> int:
    """Send ``payloads`` (ingest requests) as ``ragline.ingest.batch`` tasks of at most ``ingest.batch_docs``
    documents and ``ingest.batch_bytes`` bytes, a lone document as ``ragline.ingest.document``; returns the
    number of tasks. At least one batch per ingest process, so a small set still keeps every process busy."""
    settings = get_settings()
    per_batch = max(
        1,
        min(
            batch_docs or settings.ingest.batch_docs, -(-len(payloads) // settings.workers.ingest_concurrency)
        ),
    )
    groups = plan_batches(sizes, per_batch, settings.ingest.batch_bytes)
    for group in groups:
        if len(group) == 1:
            send_task(TASK_INGEST_DOCUMENT, payloads[group[0]])
        else:
            send_task(TASK_INGEST_BATCH, {"documents": [payloads[i] for i in group]})
    return len(groups)


def enqueue_files(
    files: list[tuple[Path, str]], tenant: str, acl: list[str], batch_docs: int | None = None
) -> str:
    """One job; the documents go out through :func:`send_in_batches`."""
    with db.connection() as conn:
        job_id = jobs.create_job(conn, "ingest", tenant, [d for _, d in files], {"files": len(files)})
    payloads, sizes = [], []
    for path, doc_id in files:
        try:
            st = path.stat()
            version, size = st.st_mtime_ns, st.st_size
        except OSError:
            version, size = 0, 0  # vanished since it was listed: the task records the error
        payloads.append(
            {
                "tenant": tenant,
                "doc_id": doc_id,
                "uri": str(path),
                "path": doc_id,
                "acl": acl,
                "version": version,
                "job_id": job_id,
            }
        )
        sizes.append(size)
    send_in_batches(payloads, sizes, lambda name, payload: app.send_task(name, args=[payload]), batch_docs)
    return job_id
