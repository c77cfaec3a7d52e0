"""Retention: delete what only history needs (beat's daily ``ragline.maintenance.purge``)."""

from __future__ import annotations

import psycopg
from psycopg.rows import DictRow


def purge(conn: psycopg.Connection[DictRow], tombstone_days: float, job_days: float) -> dict[str, int]:
    """Delete tombstones (``status = 'deleted'``, no chunks) not touched for ``tombstone_days``,
    finished jobs (their per-document rows cascade) and resolved errors older than ``job_days``.
    Open errors and running jobs are never purged: they are what an operator still acts on."""
    with conn.transaction():
        tomb = conn.execute(
            "DELETE FROM documents WHERE status = 'deleted' AND updated_at < now() - make_interval(secs => %s)",
            (tombstone_days * 86400,),
        ).rowcount
        done = conn.execute(
            "DELETE FROM jobs WHERE state IN ('succeeded', 'completed_with_errors', 'failed', 'cancelled')"
            " AND coalesce(finished_at, created_at) < now() - make_interval(secs => %s)",
            (job_days * 86400,),
        ).rowcount
        errs = conn.execute(
            "DELETE FROM document_errors WHERE resolved AND created_at < now() - make_interval(secs => %s)",
            (job_days * 86400,),
        ).rowcount
    return {"tombstones": tomb, "jobs": done, "resolved_errors": errs}
