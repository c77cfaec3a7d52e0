"""Jobs in the database: every ingest or reindex run, its per-document states and counts.

Counts are derived from ``job_documents`` rows, so a redelivered task cannot double count.
"""

from __future__ import annotations

import time

import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from ragline.shared.worker import db, pending_vectors

FINAL_DOC_STATES = ("done", "skipped", "failed")


def create_job(
    conn: psycopg.Connection[DictRow],
    kind: str,
    tenant: str | None,
    doc_ids: list[str],
    params: dict | None = None,
) -> str:
    row = db.one(
        conn.execute(
            "INSERT INTO jobs (kind, tenant, params, total, state, started_at, heartbeat_at)"
            " VALUES (%s, %s, %s, %s, 'running', now(), now()) RETURNING id",
            (kind, tenant, Jsonb(params or {}), len(doc_ids)),
        )
    )
    job_id = str(row["id"])
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO job_documents (job_id, tenant, doc_id) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            [(job_id, tenant, d) for d in doc_ids],
        )
    return job_id


def record_document(
    conn: psycopg.Connection[DictRow],
    job_id: str,
    tenant: str,
    doc_id: str,
    state: str,
    chunks: int = 0,
    embedded: int = 0,
    error: str | None = None,
    acl_outcome: str | None = None,
) -> None:
    """``acl_outcome``: what the ingest did to the document's permissions ('updated', 'ignored_stale')."""
    conn.execute(
        """
        INSERT INTO job_documents (job_id, tenant, doc_id, state, chunks, embedded, error, acl_outcome, updated_at)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now())
        ON CONFLICT (job_id, tenant, doc_id) DO UPDATE SET state = EXCLUDED.state, chunks = EXCLUDED.chunks,
            embedded = EXCLUDED.embedded, error = EXCLUDED.error, acl_outcome = EXCLUDED.acl_outcome,
            updated_at = now()
        """,
        (job_id, tenant, doc_id, state, chunks, embedded, error, acl_outcome),
    )
    conn.execute("UPDATE jobs SET heartbeat_at = now(), progress_at = now() WHERE id = %s", (job_id,))
    # a job marked stuck that makes progress after all (its queue was only slow) runs again
    conn.execute(
        "UPDATE jobs SET state = 'running', error = NULL, finished_at = NULL"
        " WHERE id = %s AND state = 'failed' AND error LIKE 'stuck:%%'",
        (job_id,),
    )
    _maybe_finish(conn, job_id)


def _maybe_finish(conn: psycopg.Connection[DictRow], job_id: str) -> None:
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


def job_summary(conn: psycopg.Connection[DictRow], job_id: str) -> dict:
    job = conn.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()
    if job is None:
        raise KeyError(job_id)
    counts = db.one(
        conn.execute(
            """
        SELECT count(*) AS documents,
               count(*) FILTER (WHERE state = 'done') AS done,
               count(*) FILTER (WHERE state = 'skipped') AS skipped_unchanged,
               count(*) FILTER (WHERE state = 'failed') AS failed,
               coalesce(sum(chunks), 0) AS chunks, coalesce(sum(embedded), 0) AS embedded,
               count(*) FILTER (WHERE acl_outcome = 'updated') AS acl_updated,
               count(*) FILTER (WHERE acl_outcome = 'ignored_stale') AS acl_ignored_stale
        FROM job_documents WHERE job_id = %s
        """,
            (job_id,),
        )
    )
    errors = conn.execute(
        "SELECT doc_id, error FROM job_documents WHERE job_id = %s AND state = 'failed' ORDER BY doc_id",
        (job_id,),
    ).fetchall()
    return {
        "job_id": job_id,
        "state": job["state"],
        **{k: int(v) for k, v in counts.items()},
        "awaiting_vectors": awaiting_vectors(conn, job_id),
        "errors": [dict(e) for e in errors],
        "visible_to_no_group": [] if job["state"] in ACTIVE_STATES else visible_to_no_group(conn, job_id),
    }


def awaiting_vectors(conn: psycopg.Connection[DictRow], job_id: str) -> int:
    """Rows of the job's documents that await their vectors (stored searchable before them,
    ``RAGLINE_INGEST_DEFER_VECTORS``; :data:`pending_vectors.PREDICATE`): the job's documents are
    done, its vector search is not until the fill has reached these."""
    budget = pending_vectors.VectorBudget.from_settings()
    return db.one(
        conn.execute(
            "SELECT count(*) AS n FROM job_documents j JOIN chunks c ON c.tenant = j.tenant"
            f" AND c.doc_id = j.doc_id WHERE j.job_id = %(job)s AND {pending_vectors.PREDICATE}",
            {"job": job_id, **budget.params()},
        )
    )["n"]


def visible_to_no_group(conn: psycopg.Connection[DictRow], job_id: str) -> list[str]:
    """Doc ids of the job's documents that are stored with an empty ACL: no query can return them
    until a permission change (``ragline acl set``) gives them a group."""
    rows = conn.execute(
        "SELECT d.doc_id FROM job_documents j JOIN documents d ON d.tenant = j.tenant AND d.doc_id = j.doc_id"
        " WHERE j.job_id = %s AND j.state IN ('done', 'skipped') AND d.status = 'ready'"
        " AND cardinality(d.acl) = 0 ORDER BY d.doc_id",
        (job_id,),
    ).fetchall()
    return [r["doc_id"] for r in rows]


# --- lifecycle: heartbeats, explicit finish, stuck detection, cancel ------------------------------
RUNNING_STATES = ("queued", "running")


def record_job(
    conn: psycopg.Connection[DictRow],
    kind: str,
    tenant: str | None,
    result: dict,
    total: int = 0,
    state: str = "succeeded",
    params: dict | None = None,
) -> str:
    """A job that ran in one go (an ACL sync batch): one row, no per-document rows."""
    row = db.one(
        conn.execute(
            "INSERT INTO jobs (kind, tenant, params, result, total, state, started_at, finished_at, heartbeat_at,"
            " progress_at) VALUES (%s, %s, %s, %s, %s, %s, now(), now(), now(), now()) RETURNING id",
            (kind, tenant, Jsonb(params or {}), Jsonb(result), total, state),
        )
    )
    return str(row["id"])


def acl_clocks(conn: psycopg.Connection[DictRow], job_ids: set[str]) -> dict[str, int]:
    """The permission clock of each job (``acl_change_seq`` when the job was created): the clock of
    the ACL its ingest requests carry. Jobs from before the clock existed have none."""
    rows = conn.execute(
        "SELECT id::text AS id, acl_seq FROM jobs WHERE id::text = ANY(%s) AND acl_seq IS NOT NULL",
        (list(job_ids),),
    ).fetchall()
    return {r["id"]: int(r["acl_seq"]) for r in rows}


def heartbeat(conn: psycopg.Connection[DictRow], job_id: str, progress: bool = False) -> bool:
    """Touch the heartbeat of a running job; False when it is no longer running (cancelled or marked stuck)."""
    row = conn.execute(
        "UPDATE jobs SET heartbeat_at = now(), progress_at = CASE WHEN %s THEN now() ELSE progress_at END"
        " WHERE id = %s AND state = 'running' RETURNING id",
        (progress, job_id),
    ).fetchone()
    return row is not None


def add_documents(conn: psycopg.Connection[DictRow], job_id: str, tenant: str, doc_ids: list[str]) -> None:
    """Attach more documents to a running job (a reindex discovers them source by source)."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO job_documents (job_id, tenant, doc_id) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            [(job_id, tenant, d) for d in doc_ids],
        )
    conn.execute(
        "UPDATE jobs SET total = (SELECT count(*) FROM job_documents WHERE job_id = %s) WHERE id = %s",
        (job_id, job_id),
    )


def finish_if_done(conn: psycopg.Connection[DictRow], job_id: str, result: dict | None = None) -> None:
    """Store the job's result and finish it if every document is final (or there were none)."""
    if result is not None:
        conn.execute("UPDATE jobs SET result = %s WHERE id = %s", (Jsonb(result), job_id))
    _maybe_finish(conn, job_id)


def finish_job(
    conn: psycopg.Connection[DictRow],
    job_id: str,
    state: str,
    result: dict | None = None,
    error: str | None = None,
) -> None:
    conn.execute(
        "UPDATE jobs SET state = %s, result = coalesce(%s, result), error = %s, finished_at = now(),"
        " heartbeat_at = now() WHERE id = %s AND state IN ('queued', 'running')",
        (state, Jsonb(result) if result is not None else None, error, job_id),
    )


def cancel_job(conn: psycopg.Connection[DictRow], job_id: str) -> bool:
    """Mark a job cancelled; its workers see it on their next heartbeat and its queued documents are skipped."""
    row = conn.execute(
        "UPDATE jobs SET state = 'cancelled', finished_at = now() WHERE id = %s AND state IN ('queued', 'running')"
        " RETURNING id",
        (job_id,),
    ).fetchone()
    return row is not None


def cancelled_jobs(conn: psycopg.Connection[DictRow], job_ids: set[str]) -> set[str]:
    rows = conn.execute(
        "SELECT id::text AS id FROM jobs WHERE id::text = ANY(%s) AND state = 'cancelled'", (list(job_ids),)
    ).fetchall()
    return {r["id"] for r in rows}


def find_jobs(conn: psycopg.Connection[DictRow], ref: str, limit: int = 5) -> list[str]:
    """Ids of the jobs whose id is ``ref`` or starts with it, newest first: ``ragline status`` shows
    the first 8 characters of an id, and that is enough to name a job."""
    rows = conn.execute(
        "SELECT id::text AS id FROM jobs WHERE starts_with(id::text, lower(%s)) ORDER BY created_at DESC"
        " LIMIT %s",
        (ref.strip(), limit),
    ).fetchall()
    return [r["id"] for r in rows]


def job_record(conn: psycopg.Connection[DictRow], job_id: str) -> dict | None:
    """The job's own row: kind, tenant, state, parameters, result, error and its times."""
    return conn.execute(
        "SELECT id::text AS id, kind, tenant, state, params, result, error, total, created_at, started_at,"
        " finished_at, heartbeat_at, progress_at FROM jobs WHERE id::text = %s",
        (job_id,),
    ).fetchone()


def job_state(conn: psycopg.Connection[DictRow], job_id: str) -> str | None:
    row = conn.execute("SELECT state FROM jobs WHERE id = %s", (job_id,)).fetchone()
    return row["state"] if row else None


def mark_stuck(conn: psycopg.Connection[DictRow], older_than_s: float) -> list[dict]:
    """Running jobs whose heartbeat is older than ``older_than_s`` become ``failed`` with a 'stuck' error.

    A worker killed mid-job never finishes it; without this the job would show 'running' forever.
    """
    rows = conn.execute(
        """
        UPDATE jobs SET state = 'failed', finished_at = now(),
               error = format('stuck: no heartbeat for %%s s (last %%s)',
                              round(extract(epoch FROM now() - coalesce(heartbeat_at, started_at, created_at))),
                              coalesce(heartbeat_at, started_at, created_at))
        WHERE state = 'running'
          AND coalesce(heartbeat_at, started_at, created_at) < now() - make_interval(secs => %s)
        RETURNING id, kind, tenant, error
        """,
        (older_than_s,),
    ).fetchall()
    return [{**r, "id": str(r["id"])} for r in rows]


def any_active(conn: psycopg.Connection[DictRow], stuck_after_s: float) -> bool:
    """Whether a job is queued or running with a heartbeat younger than ``stuck_after_s`` (an older
    one is a stuck job that :func:`mark_stuck` will fail, not work in progress)."""
    return db.one(
        conn.execute(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'running')"
            " AND coalesce(heartbeat_at, started_at, created_at) >= now() - make_interval(secs => %s)) AS x",
            (stuck_after_s,),
        )
    )["x"]


def running_jobs(conn: psycopg.Connection[DictRow], limit: int = 20) -> list[dict]:
    rows = conn.execute(
        """
        SELECT j.id, j.kind, j.tenant, j.state, j.total, j.started_at, j.heartbeat_at, j.progress_at,
               count(d.doc_id) FILTER (WHERE d.state IN ('done', 'skipped')) AS done,
               count(d.doc_id) FILTER (WHERE d.state = 'failed') AS failed
        FROM jobs j LEFT JOIN job_documents d ON d.job_id = j.id
        WHERE j.state IN ('queued', 'running')
        GROUP BY j.id ORDER BY j.created_at DESC LIMIT %s
        """,
        (limit,),
    ).fetchall()
    return [_jsonable(r) for r in rows]


def recent_jobs(conn: psycopg.Connection[DictRow], limit: int = 10) -> list[dict]:
    rows = conn.execute(
        "SELECT id, kind, tenant, state, total, error, created_at, finished_at FROM jobs"
        " ORDER BY created_at DESC LIMIT %s",
        (limit,),
    ).fetchall()
    return [_jsonable(r) for r in rows]


def open_errors(conn: psycopg.Connection[DictRow], tenant: str | None = None, limit: int = 100) -> list[dict]:
    """Unresolved per-document errors, newest first, one row per document."""
    rows = conn.execute(
        """
        SELECT DISTINCT ON (e.tenant, e.doc_id) e.id, e.tenant, e.doc_id, e.source_uri, e.stage, e.error,
               e.job_id, e.created_at
        FROM document_errors e
        WHERE NOT e.resolved AND (%(tenant)s::text IS NULL OR e.tenant = %(tenant)s)
        ORDER BY e.tenant, e.doc_id, e.created_at DESC
        """,
        {"tenant": tenant},
    ).fetchall()
    rows = sorted(rows, key=lambda r: r["created_at"], reverse=True)[:limit]
    return [_jsonable(r) for r in rows]


def resolve_errors(conn: psycopg.Connection[DictRow], tenant: str, doc_id: str) -> int:
    cur = conn.execute(
        "UPDATE document_errors SET resolved = true, resolved_at = now()"
        " WHERE tenant = %s AND doc_id = %s AND NOT resolved",
        (tenant, doc_id),
    )
    return cur.rowcount


def _jsonable(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        if hasattr(v, "isoformat"):
            v = v.isoformat()
        elif k in ("id", "job_id") and v is not None:
            v = str(v)
        out[k] = v
    return out


ACTIVE_STATES = ("queued", "running")


def wait_for_job(job_id: str, timeout: float, poll_s: float = 0.3, on_progress=None) -> dict:
    """Poll the job's summary until it leaves queued/running or ``timeout`` passes; return the last one.

    ``on_progress(summary)`` is called on every poll (the CLI's progress bars).
    """
    deadline = time.monotonic() + timeout
    while True:
        with db.connection() as conn:
            summary = job_summary(conn, job_id)
        if on_progress is not None:
            on_progress(summary)
        if summary["state"] not in ACTIVE_STATES or time.monotonic() > deadline:
            return summary
        time.sleep(poll_s)


def finished_documents(summary: dict) -> int:
    return summary["done"] + summary["skipped_unchanged"] + summary["failed"]
