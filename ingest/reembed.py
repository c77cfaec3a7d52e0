"""Background re-embedding after a model change (same vector dimension).

Chunks whose ``embed_model`` differs from the configured model are re-embedded batch by batch
and updated in place; every chunk keeps its old vector until its new one is written, so search
keeps serving throughout (lexical retrieval is unaffected; vector scores across two models are
not comparable while the switch runs). Texts go through the embedding cache, so each distinct
text is sent to the embedder once. A change of dimension needs a new column first: see
"Re-embedding runbook" in docs/operations.md.

This runs on the ingest pool, which owns the embedder; the control pool only counts what is
pending (:func:`ragline.ingest.store.pending_reembed`) and never imports this module.
"""

from __future__ import annotations

import logging

import numpy as np
import psycopg

from ragline.ingest.contextualize import embedding_text
from ragline.ingest.embed import embed_with_cache
from ragline.shared import db, jobs
from ragline.shared.providers import get_embedder
from ragline.shared.settings import get_settings

log = logging.getLogger(__name__)

LOCK_KEY = "ragline.reembed"

BATCH_SQL = """
SELECT id, tenant, doc_id, content, context, content_hash FROM chunks
WHERE embed_model IS DISTINCT FROM %(model)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY id LIMIT %(n)s
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


def column_dim(conn: psycopg.Connection) -> int | None:
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
        got = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s)) AS ok", (LOCK_KEY,)).fetchone()["ok"]
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
                rows = conn.execute(BATCH_SQL, {"model": model, "tenant": tenant, "n": size}).fetchall()
                if not rows:
                    break
                emb = embed_with_cache(
                    conn,
                    embedder,
                    [embedding_text(r["context"], r["content"]) for r in rows],
                    settings.embed.batch_size,
                )
                with conn.transaction():
                    cur = conn.execute(
                        UPDATE_SQL,
                        {
                            "model": model,
                            "ids": [r["id"] for r in rows],
                            "hashes": [r["content_hash"] for r in rows],
                            "vecs": [np.asarray(v, dtype=np.float32) for v in emb.vectors],
                        },
                    )
                    conn.execute(
                        DOCS_SQL,
                        {
                            "model": model,
                            "tenants": [r["tenant"] for r in rows],
                            "docs": [r["doc_id"] for r in rows],
                        },
                    )
                chunks += cur.rowcount
                sent += emb.embedded
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
