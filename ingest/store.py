"""Idempotent storage of a document and its chunks, in one transaction per document.

Chunks are COPYed into a temporary staging table and merged with ``ON CONFLICT (tenant,
doc_id, chunk_no) DO UPDATE``; chunk numbers beyond the new count are deleted. An advisory
lock per document keeps two ingests of the same document from interleaving, and the version
check makes the newest version win. The document's row is locked before its permissions are
decided (``acl_sync.ingest_acl_decision``), so a permission change arriving meanwhile waits and
then applies on top.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from ragline.ingest import acl_sync


@dataclass
class StoredChunk:
    chunk_no: int
    content: str
    context: str
    heading_path: str
    page: int | None
    embedding: np.ndarray | None
    metadata: dict = field(default_factory=dict)
    code_tsv: str | None = None  # a code chunk's identifier terms, a tsvector literal (migration 0008)
    layer: str | None = None  # a chunk's own layer (a source file's symbol records), else the document's

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(f"{self.context}\x00{self.content}".encode()).hexdigest()


@dataclass
class DocumentRecord:
    tenant: str
    doc_id: str
    source_uri: str | None
    path: str
    title: str
    content_hash: str
    version: int
    acl: list[str]
    layer: str = "docs"
    metadata: dict = field(default_factory=dict)
    acl_seq: int | None = None  # the permission clock the ingest was accepted at (None: now)
    acl_outcome: str | None = None  # set by upsert_document: 'updated', 'ignored_stale' or None


def lock_document(conn: psycopg.Connection, tenant: str, doc_id: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", (tenant, doc_id))


STATE_COLUMNS = "version, content_hash, embed_model, status, acl, acl_seq, ingest_acl"
STATE_SQL = f"SELECT {STATE_COLUMNS} FROM documents WHERE tenant = %s AND doc_id = %s"


def current_state(conn: psycopg.Connection, tenant: str, doc_id: str) -> dict | None:
    return conn.execute(STATE_SQL, (tenant, doc_id)).fetchone()


def locked_state(conn: psycopg.Connection, tenant: str, doc_id: str) -> dict:
    """The document's row, locked until the transaction ends; a new document first gets a row of
    its own (uncommitted, so nobody else sees it), which a concurrent permission change waits for."""
    state = conn.execute(STATE_SQL + " FOR UPDATE", (tenant, doc_id)).fetchone()
    if state is None:
        state = (
            conn.execute(
                f"INSERT INTO documents (tenant, doc_id) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING {STATE_COLUMNS}",
                (tenant, doc_id),
            ).fetchone()
            or conn.execute(STATE_SQL + " FOR UPDATE", (tenant, doc_id)).fetchone()
        )
    return state


def is_unchanged(state: dict | None, content_hash: str, embed_model: str) -> bool:
    return bool(
        state
        and state["status"] == "ready"
        and state["content_hash"] == content_hash
        and state["embed_model"] == embed_model
    )


def upsert_document(
    conn: psycopg.Connection, doc: DocumentRecord, chunks: list[StoredChunk], embed_model: str
) -> str:
    """Write the document and its chunks; return ``stored`` or ``stale`` (a newer version won).

    The caller owns the transaction (``with conn.transaction()``) and has taken the lock.
    """
    state = locked_state(conn, doc.tenant, doc.doc_id)
    if state["version"] > doc.version:
        return "stale"
    # the ingest's ACL replaces the stored one only when it is a change the ingest asks for and no
    # permission change was applied since the ingest was accepted (the row is locked: decided once)
    apply, doc.acl_outcome = acl_sync.ingest_acl_decision(state, doc.acl, doc.acl_seq)
    acl = list(doc.acl) if apply else list(state["acl"])
    # acl_seq: the ingest's clock when its ACL applies (taken in this statement), else unchanged
    row = conn.execute(
        f"""
        INSERT INTO documents (tenant, doc_id, source_uri, path, layer, title, content_hash, version, acl,
                               acl_seq, ingest_acl, status, embed_model, chunk_count, metadata, error, updated_at)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, CASE WHEN %s THEN {acl_sync.CLOCK_EXPR} ELSE %s END,
                %s, 'ready', %s, %s, %s, NULL, now())
        ON CONFLICT (tenant, doc_id) DO UPDATE SET
            source_uri = EXCLUDED.source_uri, path = EXCLUDED.path, layer = EXCLUDED.layer,
            title = EXCLUDED.title, content_hash = EXCLUDED.content_hash, version = EXCLUDED.version,
            acl = EXCLUDED.acl, acl_seq = EXCLUDED.acl_seq, ingest_acl = EXCLUDED.ingest_acl,
            status = 'ready', embed_model = EXCLUDED.embed_model,
            chunk_count = EXCLUDED.chunk_count, metadata = EXCLUDED.metadata, error = NULL, updated_at = now()
        RETURNING acl
        """,
        (
            doc.tenant,
            doc.doc_id,
            doc.source_uri,
            doc.path,
            doc.layer,
            doc.title,
            doc.content_hash,
            doc.version,
            acl,
            apply,
            doc.acl_seq,
            doc.acl_seq,
            doc.acl_seq,
            state["acl_seq"],
            list(doc.acl),
            embed_model,
            len(chunks),
            Jsonb(doc.metadata),
        ),
    ).fetchone()
    acl = list(row["acl"])
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS chunk_stage (LIKE chunks INCLUDING DEFAULTS EXCLUDING IDENTITY)"
        " ON COMMIT DELETE ROWS"
    )
    with conn.cursor() as cur:
        with cur.copy(
            "COPY chunk_stage (tenant, doc_id, chunk_no, path, layer, heading_path, content, context,"
            " content_hash, page, embedding, embed_model, acl, metadata, code_tsv) FROM STDIN"
        ) as copy:
            for c in chunks:
                copy.write_row(
                    (
                        doc.tenant,
                        doc.doc_id,
                        c.chunk_no,
                        doc.path,
                        c.layer or doc.layer,
                        c.heading_path,
                        c.content,
                        c.context,
                        c.content_hash,
                        c.page,
                        c.embedding,
                        embed_model if c.embedding is not None else None,  # a row stored before its vector
                        acl,
                        Jsonb(c.metadata),
                        c.code_tsv,
                    )
                )
    conn.execute(
        """
        INSERT INTO chunks (tenant, doc_id, chunk_no, path, layer, heading_path, content, context,
                            content_hash, page, embedding, embed_model, acl, metadata, code_tsv, updated_at)
        SELECT tenant, doc_id, chunk_no, path, layer, heading_path, content, context,
               content_hash, page, embedding, embed_model, acl, metadata, code_tsv, now()
        FROM chunk_stage
        ON CONFLICT (tenant, doc_id, chunk_no) DO UPDATE SET
            path = EXCLUDED.path, layer = EXCLUDED.layer, heading_path = EXCLUDED.heading_path,
            content = EXCLUDED.content, context = EXCLUDED.context, content_hash = EXCLUDED.content_hash,
            page = EXCLUDED.page, embedding = EXCLUDED.embedding, embed_model = EXCLUDED.embed_model,
            acl = EXCLUDED.acl, metadata = EXCLUDED.metadata, code_tsv = EXCLUDED.code_tsv, updated_at = now()
        WHERE chunks.content_hash IS DISTINCT FROM EXCLUDED.content_hash
           OR chunks.embed_model IS DISTINCT FROM EXCLUDED.embed_model
           OR chunks.acl IS DISTINCT FROM EXCLUDED.acl
           OR chunks.path IS DISTINCT FROM EXCLUDED.path
           OR chunks.metadata IS DISTINCT FROM EXCLUDED.metadata
           OR chunks.code_tsv IS DISTINCT FROM EXCLUDED.code_tsv
           OR chunks.layer IS DISTINCT FROM EXCLUDED.layer
        """
    )
    conn.execute(
        "DELETE FROM chunks WHERE tenant = %s AND doc_id = %s AND chunk_no >= %s",
        (doc.tenant, doc.doc_id, len(chunks)),
    )
    # a good version is stored: earlier errors of this document are resolved (`ragline errors`)
    conn.execute(
        "UPDATE document_errors SET resolved = true, resolved_at = now()"
        " WHERE tenant = %s AND doc_id = %s AND NOT resolved",
        (doc.tenant, doc.doc_id),
    )
    return "stored"


def mark_failed(
    conn: psycopg.Connection,
    tenant: str,
    doc_id: str,
    source_uri: str | None,
    stage: str,
    error: str,
    job_id: str | None = None,
) -> None:
    """Record a per-document error; an existing good version of the document keeps serving."""
    conn.execute(
        """
        INSERT INTO documents (tenant, doc_id, source_uri, status, error)
        VALUES (%s, %s, %s, 'failed', %s)
        ON CONFLICT (tenant, doc_id) DO UPDATE SET error = EXCLUDED.error, updated_at = now(),
            status = CASE WHEN documents.status = 'ready' THEN 'ready' ELSE 'failed' END
        """,
        (tenant, doc_id, source_uri, error),
    )
    conn.execute(
        "INSERT INTO document_errors (job_id, tenant, doc_id, source_uri, stage, error)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (job_id, tenant, doc_id, source_uri, stage, error),
    )


PENDING_REEMBED_SQL = """
SELECT count(*) AS n FROM chunks
WHERE embed_model IS DISTINCT FROM %(model)s AND embedding IS NOT NULL
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
"""


def pending_reembed(conn: psycopg.Connection, model: str, tenant: str | None = None) -> int:
    """Chunks (of ``tenant``, or all) whose vectors come from another model than ``model`` (rows
    without a vector yet are the fill's, :mod:`ragline.shared.pending_vectors`)."""
    return int(conn.execute(PENDING_REEMBED_SQL, {"model": model, "tenant": tenant}).fetchone()["n"])
