"""Jobs in the database: every ingest or reindex run, its per-document states and counts.

Counts are derived from ``job_documents`` rows, so a redelivered task cannot double count.
"""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb

FINAL_DOC_STATES = ("done", "skipped", "failed")


def create_job(conn: psycopg.Connection, kind: str, tenant: str | None, doc_ids: list[str],
               params: dict | None = None) -> str:
    row = conn.execute(
        "INSERT INTO jobs (kind, tenant, params, total, state, started_at, heartbeat_at)"
        " VALUES (%s, %s, %s, %s, 'running', now(), now()) RETURNING id",
        (kind, tenant, Jsonb(params or {}), len(doc_ids)),
    ).fetchone()
    job_id = str(row["id"])
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO job_documents (job_id, tenant, doc_id) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            [(job_id, tenant, d) for d in doc_ids],
        )
    return job_id


def record_document(conn: psycopg.Connection, job_id: str, tenant: str, doc_id: str, state: str,
                    chunks: int = 0, embedded: int = 0, error: str | None = None) -> None:
    conn.execute(
        """
        INSERT INTO job_documents (job_id, tenant, doc_id, state, chunks, embedded, error, updated_at)
        VALUES (%s, %s, %s, %s, %s, %s, %s, now())
        ON CONFLICT (job_id, tenant, doc_id) DO UPDATE SET state = EXCLUDED.state, chunks = EXCLUDED.chunks,
            embedded = EXCLUDED.embedded, error = EXCLUDED.error, updated_at = now()
        """,
        (job_id, tenant, doc_id, state, chunks, embedded, error),
    )
    conn.execute("UPDATE jobs SET heartbeat_at = now(), progress_at = now() WHERE id = %s", (job_id,))
    _maybe_finish(conn, job_id)


def _maybe_finish(conn: psycopg.Connection, job_id: str) -> None:
    conn.execute(
        """
        UPDATE jobs j SET state = CASE WHEN s.failed > 0 THEN 'completed_with_errors' ELSE 'succeeded' END,
                          finished_at = now()
        FROM (SELECT count(*) FILTER (WHERE state = 'failed') AS failed,
                     count(*) FILTER (WHERE state NOT IN ('done', 'skipped', 'failed')) AS open
              FROM job_documents WHERE job_id = %s) s
        WHERE j.id = %s AND j.state = 'running' AND s.open = 0
        """,
        (job_id, job_id),
    )


def job_summary(conn: psycopg.Connection, job_id: str) -> dict:
    job = conn.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()
    if job is None:
        raise KeyError(job_id)
    counts = conn.execute(
        """
        SELECT count(*) AS documents,
               count(*) FILTER (WHERE state = 'done') AS done,
               count(*) FILTER (WHERE state = 'skipped') AS skipped_unchanged,
               count(*) FILTER (WHERE state = 'failed') AS failed,
               coalesce(sum(chunks), 0) AS chunks, coalesce(sum(embedded), 0) AS embedded
        FROM job_documents WHERE job_id = %s
        """,
        (job_id,),
    ).fetchone()
    errors = conn.execute(
        "SELECT doc_id, error FROM job_documents WHERE job_id = %s AND state = 'failed' ORDER BY doc_id",
        (job_id,),
    ).fetchall()
    return {"job_id": job_id, "state": job["state"], **{k: int(v) for k, v in counts.items()},
            "errors": [dict(e) for e in errors]}
