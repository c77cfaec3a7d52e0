"""Background re-embedding after a model change (same vector dimension), and the vector fill.

Chunks whose ``embed_model`` differs from the configured model are re-embedded batch by batch
and updated in place; every chunk keeps its old vector until its new one is written, so search
keeps serving throughout (lexical retrieval is unaffected; vector scores across two models are
not comparable while the switch runs). Texts go through the embedding cache, so each distinct
text is sent to the embedder once. A change of dimension needs a new column first: see
"Re-embedding runbook" in docs/operations.md.

The fill (:func:`run_fill`) is the same machinery for rows stored before their vectors
(``RAGLINE_INGEST_DEFER_VECTORS``): the ingest task sends it once it has stored such rows. It embeds
only what the embedding budget embeds (:class:`ragline.shared.worker.pending_vectors.VectorBudget`):
rows of a lexical-only layer are never picked.

This runs on the ingest pool, which owns the embedder; the control pool only counts what is
pending (:func:`ragline.ingest.store.pending_reembed`) and never imports this module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import psycopg
from psycopg.rows import DictRow

from ragline.ingest.contextualize import embedding_text
from ragline.ingest.embed import embed_with_cache
from ragline.shared.config.settings import get_settings
from ragline.shared.worker import db, jobs, pending_vectors
from ragline.shared.worker.metrics import observe_stage
from ragline.shared.worker.providers import get_embedder

log = logging.getLogger(__name__)

LOCK_KEY = "ragline.reembed"
FILL_LOCK_KEY = "ragline.fill_vectors"

#: a model change re-embeds the rows whose vector comes from another model; the fill embeds the rows
#: stored before their vectors (:data:`ragline.shared.worker.pending_vectors.PREDICATE`). The two sets are
#: disjoint, so a re-embedding and a fill running at once never embed the same row twice
REEMBED_ROWS = "c.embed_model IS DISTINCT FROM %(model)s AND c.embedding IS NOT NULL"
FILL_ROWS = pending_vectors.PREDICATE

# by layer (source chunks, then symbol records, then tests and docs), shorter first; rows without
# any vector before rows of an older model, should one statement ever serve both
BATCH_SQL = """
SELECT c.id, c.tenant, c.doc_id, c.layer, c.content, c.context, c.content_hash FROM chunks c
WHERE {rows} AND (%(tenant)s::text IS NULL OR c.tenant = %(tenant)s)
ORDER BY c.embedding IS NOT NULL,
         CASE c.layer WHEN %(source)s THEN 0 WHEN %(symbols)s THEN 1 ELSE 2 END,
         length(c.content), c.id
LIMIT %(n)s
"""

# the content_hash guard: a chunk rewritten by a concurrent ingest is left to that ingest
UPDATE_SQL = """
UPDATE chunks c SET embedding = u.embedding, embed_model = %(model)s, updated_at = now()
FROM unnest(%(ids)s::bigint[], %(hashes)s::text[], %(vecs)s::vector[]) AS u(id, content_hash, embedding)
WHERE c.id = u.id AND c.content_hash = u.content_hash AND c.embed_model IS DISTINCT FROM %(model)s
"""

DOCS_SQL = """
UPDATE documents d SET embed_model = %(model)s, updated_at = now()
FROM (SELECT DISTINCT tenant, doc_id FROM unnest(%(tenants)s::text[], %(docs)s::text[]) AS t(tenant, doc_id)) t
WHERE d.tenant = t.tenant AND d.doc_id = t.doc_id AND d.embed_model IS DISTINCT FROM %(model)s
  AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.tenant = d.tenant AND c.doc_id = d.doc_id
                  AND c.embed_model IS DISTINCT FROM %(model)s)
"""


def next_rows(
    conn: psycopg.Connection[DictRow], rows: str, model: str, n: int, tenant: str | None = None
) -> list[dict]:
    """The next ``n`` rows matching ``rows`` (:data:`REEMBED_ROWS` or :data:`FILL_ROWS`), by priority."""
    settings = get_settings()
    code = settings.code
    params = {
        **pending_vectors.VectorBudget.from_settings(settings).params(),
        "model": model,
        "tenant": tenant,
        "n": n,
        "source": code.source_layer,
        "symbols": code.symbols_layer,
    }
    return conn.execute(BATCH_SQL.format(rows=rows), params).fetchall()


def embed_rows(conn: psycopg.Connection[DictRow], embedder, rows: list[dict]) -> tuple[int, int]:
    """Embed ``rows`` through the cache and write their vectors in one transaction; (rows written,
    texts sent to the embedder)."""
    layers: dict[str, int] = {}
    for r in rows:
        layers[r["layer"]] = layers.get(r["layer"], 0) + 1
    t = time.perf_counter()
    emb = embed_with_cache(
        conn,
        embedder,
        [embedding_text(r["context"], r["content"]) for r in rows],
        get_settings().embed.batch_size,
    )
    observe_stage("embed", time.perf_counter() - t, layers)
    t = time.perf_counter()
    with conn.transaction():
        cur = conn.execute(
            UPDATE_SQL,
            {
                "model": embedder.model,
                "ids": [r["id"] for r in rows],
                "hashes": [r["content_hash"] for r in rows],
                "vecs": [np.asarray(v, dtype=np.float32) for v in emb.vectors],
            },
        )
        conn.execute(
            DOCS_SQL,
            {
                "model": embedder.model,
                "tenants": [r["tenant"] for r in rows],
                "docs": [r["doc_id"] for r in rows],
            },
        )
    observe_stage("store", time.perf_counter() - t, layers)
    return cur.rowcount, emb.embedded


def fill_batches(
    batch: Callable[[], tuple[int, int] | None],
    max_batches: int,
    budget_s: float,
    started: float,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[int, int]:
    """Run ``batch`` (rows written and texts embedded, None when nothing is left) up to
    ``max_batches`` times, starting no batch once ``budget_s`` has passed since ``started``
    (on ``clock``); at least one batch always runs. The totals (rows written, texts embedded)."""
    written = sent = 0
    for _ in range(max_batches):
        done = batch()
        if done is None:
            break
        written, sent = written + done[0], sent + done[1]
        if clock() - started >= budget_s:
            break
    return written, sent


def run_fill(
    max_batches: int | None = None, batch_rows: int | None = None, max_seconds: float | None = None
) -> dict:
    """Embed rows stored before their vectors, by priority: at most ``max_batches`` batches and no
    new batch after ``max_seconds`` (default half the task's soft time limit), then the worker goes
    back to queued ingest batches. The time budget matters on a loaded machine: four batches of 128
    rows at a CPU embedder's 0.8 rows/s outlast a 600 s soft limit, and a fill task stopped by the
    limit sends no successor. One runner at a time; a runner that finds the lock taken leaves the
    rows to its holder, which looks again after releasing it (``more``), so no row stored meanwhile
    is left without a fill."""
    settings = get_settings()
    max_batches = max_batches or settings.ingest.fill_batches_per_task
    batch_rows = batch_rows or settings.ingest.fill_batch_rows
    budget = settings.workers.task_soft_time_limit_s / 2 if max_seconds is None else max_seconds
    started = time.monotonic()
    embedder = get_embedder()
    with db.connection() as conn:
        got = db.one(conn.execute("SELECT pg_try_advisory_lock(hashtext(%s)) AS ok", (FILL_LOCK_KEY,)))["ok"]
        conn.commit()
        if not got:
            return {"state": "skipped", "reason": "another fill is running", "more": False}

        def batch() -> tuple[int, int] | None:
            rows = next_rows(conn, FILL_ROWS, embedder.model, batch_rows)
            conn.commit()
            return embed_rows(conn, embedder, rows) if rows else None

        try:
            written, sent = fill_batches(batch, max_batches, budget, started)
        finally:
            conn.rollback()
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (FILL_LOCK_KEY,))
            conn.commit()
        # after the unlock: a row stored while the lock was held, whose own fill was skipped, is seen here
        layers = pending_vectors.VectorBudget.from_settings(settings).params()
        more = db.one(
            conn.execute(f"SELECT EXISTS (SELECT 1 FROM chunks c WHERE {FILL_ROWS}) AS more", layers)
        )["more"]
        conn.commit()
    log.info("vector fill: %d rows written, %d texts embedded, more: %s", written, sent, more)
    return {"state": "succeeded", "rows": written, "embedded": sent, "more": bool(more)}


def column_dim(conn: psycopg.Connection[DictRow]) -> int | None:
    row = conn.execute(
        "SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute"
        " WHERE attrelid = 'chunks'::regclass AND attname = 'embedding'"
    ).fetchone()
    t = row["t"] if row else ""
    return int(t[t.index("(") + 1 : t.index(")")]) if "(" in t else None


def run_reembed(job_id: str | None = None, batch_size: int | None = None, tenant: str | None = None) -> dict:
    """Re-embed every chunk (of ``tenant``, or all) not on the configured model; one runner at a time;
    cancellable through its job (``ragline cancel JOB``)."""
    settings = get_settings()
    size = batch_size or settings.lifecycle.reembed_batch_size
    embedder = get_embedder()
    model = embedder.model
    with db.connection() as conn:
        got = db.one(conn.execute("SELECT pg_try_advisory_lock(hashtext(%s)) AS ok", (LOCK_KEY,)))["ok"]
        conn.commit()
        if not got:
            return {"state": "skipped", "reason": "another re-embedding is running"}
        try:
            dim = column_dim(conn)
            if dim is not None and embedder.dim != dim:
                raise RuntimeError(
                    f"model {model} has dimension {embedder.dim}, chunks.embedding has {dim}:"
                    " follow the re-embedding runbook (new column) in docs/operations.md"
                )
            if job_id is None:
                job_id = jobs.create_job(conn, "reembed", tenant, [], {"model": model})
            conn.commit()
            chunks = sent = 0
            state = "succeeded"
            while True:
                if not jobs.heartbeat(conn, job_id):
                    state = jobs.job_state(conn, job_id) or "cancelled"
                    break
                conn.commit()
                rows = next_rows(conn, REEMBED_ROWS, model, size, tenant)
                if not rows:
                    break
                n, e = embed_rows(conn, embedder, rows)
                chunks += n
                sent += e
                jobs.heartbeat(conn, job_id, progress=True)
                conn.commit()
            result = {"model": model, "chunks": chunks, "embedded": sent}
            if state == "succeeded":
                jobs.finish_job(conn, job_id, "succeeded", result)
            conn.commit()
            log.info("re-embedding %s: %s", state, result)
            return {"job_id": job_id, "state": state, **result}
        except Exception as exc:
            conn.rollback()
            if job_id:
                jobs.finish_job(conn, job_id, "failed", error=f"{type(exc).__name__}: {str(exc)[:500]}")
                conn.commit()
            raise
        finally:
            conn.rollback()
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (LOCK_KEY,))
            conn.commit()
