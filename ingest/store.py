"""Idempotent storage of documents and their chunks, several documents per transaction.

The documents' rows are upserted in one statement; the chunks of all of them are COPYed (binary,
vectors in pgvector's binary form) into a temporary staging table and merged with ``ON CONFLICT
(tenant, doc_id, chunk_no) DO UPDATE``; chunk numbers beyond each new count are deleted. A
transaction costs the same few statements for one document or a hundred. An advisory lock per
document keeps two ingests of the same document from interleaving, and the version check,
decided per document, makes the newest version win. The document's row is locked before its permissions are
decided (``acl_sync.ingest_acl_decision``), so a permission change arriving meanwhile waits and
then applies on top.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from ragline.ingest import acl_sync
from ragline.shared.worker import db


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


Key = tuple[str, str]  # (tenant, doc_id)


def lock_document(conn: psycopg.Connection[DictRow], tenant: str, doc_id: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", (tenant, doc_id))


def lock_documents(conn: psycopg.Connection[DictRow], keys: list[Key]) -> None:
    """The advisory locks of several documents in one statement, taken in (tenant, doc_id) order, so
    two batches that share documents queue behind each other instead of deadlocking."""
    ordered = sorted(set(keys))
    conn.execute(
        "SELECT count(pg_advisory_xact_lock(hashtext(t), hashtext(d)))"
        " FROM (SELECT t, d FROM unnest(%s::text[], %s::text[]) AS u(t, d) ORDER BY t, d) AS k",
        ([t for t, _ in ordered], [d for _, d in ordered]),
    )


#: a document's row as the store decides on it: version and ACL state, and who owns the doc id
#: (``ingest/identity.py``)
STATE_COLUMNS = (
    "version, content_hash, embed_model, status, acl, acl_seq, ingest_acl,"
    " source_uri, metadata->>'source' AS source, metadata->>'source_root' AS source_root,"
    " metadata->>'format' AS format, metadata->>'prepared_with' AS prepared_with"
)
STATE_SQL = f"SELECT {STATE_COLUMNS} FROM documents WHERE tenant = %s AND doc_id = %s"
STATES_SQL = (
    f"SELECT tenant, doc_id, {STATE_COLUMNS} FROM documents"
    " JOIN unnest(%s::text[], %s::text[]) AS k(tenant, doc_id) USING (tenant, doc_id)"
)


def current_state(conn: psycopg.Connection[DictRow], tenant: str, doc_id: str) -> dict | None:
    return conn.execute(STATE_SQL, (tenant, doc_id)).fetchone()


def current_states(conn: psycopg.Connection[DictRow], keys: list[Key]) -> dict[Key, dict]:
    """The stored rows of those of ``keys`` that have one, in one statement."""
    if not keys:
        return {}
    rows = conn.execute(STATES_SQL, ([t for t, _ in keys], [d for _, d in keys])).fetchall()
    return {(r["tenant"], r["doc_id"]): r for r in rows}


def locked_states(conn: psycopg.Connection[DictRow], keys: list[Key]) -> dict[Key, dict]:
    """The documents' rows, locked until the transaction ends (in key order); a new document first
    gets a row of its own (uncommitted, so nobody else sees it), which a concurrent permission change
    waits for."""
    ordered = sorted(set(keys))
    if not ordered:
        return {}

    def select(ks: list[Key]) -> dict[Key, dict]:
        rows = conn.execute(
            STATES_SQL + " ORDER BY tenant, doc_id FOR UPDATE OF documents",
            ([t for t, _ in ks], [d for _, d in ks]),
        ).fetchall()
        return {(r["tenant"], r["doc_id"]): r for r in rows}

    states = select(ordered)
    missing = [k for k in ordered if k not in states]
    if missing:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO documents (tenant, doc_id)"
                " SELECT * FROM unnest(%s::text[], %s::text[]) AS k(tenant, doc_id) ORDER BY 1, 2"
                f" ON CONFLICT DO NOTHING RETURNING tenant, doc_id, {STATE_COLUMNS}",
                ([t for t, _ in missing], [d for _, d in missing]),
            )
            states.update({(r["tenant"], r["doc_id"]): r for r in cur.fetchall()})
        raced = [k for k in missing if k not in states]  # inserted by someone else meanwhile
        if raced:
            states.update(select(raced))
    return states


def locked_state(conn: psycopg.Connection[DictRow], tenant: str, doc_id: str) -> dict:
    return locked_states(conn, [(tenant, doc_id)])[(tenant, doc_id)]


def is_unchanged(state: dict | None, content_hash: str, embed_model: str, prepared_with: str) -> bool:
    """The stored document is this one, as this version of ragline would store it: the same bytes,
    embedding model and preparation (``prepared_with``: format and its version; a document stored
    before the version was recorded counts as version 1 of the format it was stored as)."""
    if not state or state["status"] != "ready":
        return False
    stored = state.get("prepared_with") or f"{state.get('format')}/1"
    return (
        state["content_hash"] == content_hash
        and state["embed_model"] == embed_model
        and stored == prepared_with
    )


def upsert_document(
    conn: psycopg.Connection[DictRow], doc: DocumentRecord, chunks: list[StoredChunk], embed_model: str
) -> str:
    """Write the document and its chunks; return ``stored`` or ``stale`` (a newer version won).

    The caller owns the transaction (``with conn.transaction()``) and has taken the lock.
    """
    return upsert_documents(conn, [(doc, chunks)], embed_model)[0]


# the documents' rows: the ingest's clock when its ACL applies (taken in this statement), else unchanged
_DOCUMENTS_SQL = f"""
INSERT INTO documents (tenant, doc_id, source_uri, path, layer, title, content_hash, version, acl,
                       acl_seq, ingest_acl, status, embed_model, chunk_count, metadata, error, updated_at)
SELECT i.tenant, i.doc_id, i.source_uri, i.path, i.layer, i.title, i.content_hash, i.version, i.acl,
       CASE WHEN i.apply THEN {acl_sync.clock_expr("i.acl_seq")} ELSE i.kept_seq END,
       i.ingest_acl, 'ready', %(model)s, i.chunk_count, i.metadata, NULL, now()
FROM jsonb_to_recordset(%(docs)s::jsonb) AS i(
    tenant text, doc_id text, source_uri text, path text, layer text, title text, content_hash text,
    version bigint, acl text[], apply boolean, acl_seq bigint, kept_seq bigint, ingest_acl text[],
    chunk_count integer, metadata jsonb)
ORDER BY i.tenant, i.doc_id
ON CONFLICT (tenant, doc_id) DO UPDATE SET
    source_uri = EXCLUDED.source_uri, path = EXCLUDED.path, layer = EXCLUDED.layer,
    title = EXCLUDED.title, content_hash = EXCLUDED.content_hash, version = EXCLUDED.version,
    acl = EXCLUDED.acl, acl_seq = EXCLUDED.acl_seq, ingest_acl = EXCLUDED.ingest_acl,
    status = 'ready', embed_model = EXCLUDED.embed_model,
    chunk_count = EXCLUDED.chunk_count, metadata = EXCLUDED.metadata, error = NULL, updated_at = now()
"""

# the staging table of one statement's chunks: the COPY is binary, so a code chunk's terms travel as
# text (no binary tsvector dumper) and become a tsvector in the merge
_STAGE_SQL = """
CREATE TEMP TABLE IF NOT EXISTS chunk_batch_stage (
    tenant text, doc_id text, chunk_no integer, path text, layer text, heading_path text, content text,
    context text, content_hash text, page integer, embedding vector, embed_model text, acl text[],
    metadata jsonb, code_tsv text
) ON COMMIT DELETE ROWS
"""
_STAGE_COLUMNS = (
    "tenant, doc_id, chunk_no, path, layer, heading_path, content, context, content_hash, page,"
    " embedding, embed_model, acl, metadata, code_tsv"
)
_STAGE_TYPES = [
    "text", "text", "int4", "text", "text", "text", "text", "text", "text", "int4",
    "vector", "text", "text[]", "jsonb", "text",
]  # fmt: skip
_MERGE_SQL = """
INSERT INTO chunks (tenant, doc_id, chunk_no, path, layer, heading_path, content, context,
                    content_hash, page, embedding, embed_model, acl, metadata, code_tsv, updated_at)
SELECT tenant, doc_id, chunk_no, path, layer, heading_path, content, context,
       content_hash, page, embedding, embed_model, acl, metadata, code_tsv::tsvector, now()
FROM chunk_batch_stage
ORDER BY tenant, doc_id, chunk_no
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
# chunk numbers beyond each document's new count, and the errors a good version resolves
_TRIM_SQL = """
DELETE FROM chunks c USING unnest(%s::text[], %s::text[], %s::int[]) AS k(tenant, doc_id, n)
WHERE c.tenant = k.tenant AND c.doc_id = k.doc_id AND c.chunk_no >= k.n
"""
_RESOLVE_SQL = """
UPDATE document_errors e SET resolved = true, resolved_at = now()
FROM unnest(%s::text[], %s::text[]) AS k(tenant, doc_id)
WHERE e.tenant = k.tenant AND e.doc_id = k.doc_id AND NOT e.resolved
"""


def upsert_documents(
    conn: psycopg.Connection[DictRow],
    items: list[tuple[DocumentRecord, list[StoredChunk]]],
    embed_model: str,
    states: dict[Key, dict] | None = None,
) -> list[str]:
    """Write several documents and their chunks with a fixed number of statements whatever their
    count (the rows of every document travel in one binary COPY); per document ``stored`` or
    ``stale`` (a newer version won), each decided exactly as if it were written alone.

    The caller owns the transaction and has taken the locks (:func:`lock_documents`); ``states`` are
    the rows :func:`locked_states` locked, taken here when not given. A doc id appears at most once:
    two versions of one document in one statement would decide against the same stored row.
    """
    keys = [(d.tenant, d.doc_id) for d, _ in items]
    if len(set(keys)) != len(keys):
        raise ValueError("upsert_documents: a document appears twice")
    if states is None:
        states = locked_states(conn, keys)
    outcomes: list[str] = []
    docs: list[dict] = []
    written: list[tuple[DocumentRecord, list[StoredChunk], list[str]]] = []
    for (doc, chunks), key in zip(items, keys, strict=True):
        state = states[key]
        if state["version"] > doc.version:
            outcomes.append("stale")
            continue
        # the ingest's ACL replaces the stored one only when it is a change the ingest asks for and
        # no permission change was applied since the ingest was accepted (the row is locked)
        apply, doc.acl_outcome = acl_sync.ingest_acl_decision(state, doc.acl, doc.acl_seq)
        acl = list(doc.acl) if apply else list(state["acl"])
        outcomes.append("stored")
        written.append((doc, chunks, acl))
        docs.append(
            {
                "tenant": doc.tenant,
                "doc_id": doc.doc_id,
                "source_uri": doc.source_uri,
                "path": doc.path,
                "layer": doc.layer,
                "title": doc.title,
                "content_hash": doc.content_hash,
                "version": doc.version,
                "acl": acl,
                "apply": apply,
                "acl_seq": doc.acl_seq,
                "kept_seq": state["acl_seq"],
                "ingest_acl": list(doc.acl),
                "chunk_count": len(chunks),
                "metadata": doc.metadata,
            }
        )
    if not written:
        return outcomes
    conn.execute(_DOCUMENTS_SQL, {"model": embed_model, "docs": Jsonb(docs)})
    conn.execute(_STAGE_SQL)
    with conn.cursor() as cur:
        with cur.copy(f"COPY chunk_batch_stage ({_STAGE_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_STAGE_TYPES)
            for doc, chunks, acl in written:
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
                            embed_model
                            if c.embedding is not None
                            else None,  # a row stored before its vector
                            acl,
                            Jsonb(c.metadata),
                            c.code_tsv,
                        )
                    )
    conn.execute(_MERGE_SQL)
    tenants = [d.tenant for d, _, _ in written]
    doc_ids = [d.doc_id for d, _, _ in written]
    conn.execute(_TRIM_SQL, (tenants, doc_ids, [len(c) for _, c, _ in written]))
    # a good version is stored: earlier errors of these documents are resolved (`ragline errors`)
    conn.execute(_RESOLVE_SQL, (tenants, doc_ids))
    return outcomes


def mark_failed(
    conn: psycopg.Connection[DictRow],
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


def pending_reembed(conn: psycopg.Connection[DictRow], model: str, tenant: str | None = None) -> int:
    """Chunks (of ``tenant``, or all) whose vectors come from another model than ``model`` (rows
    without a vector yet are the fill's, :mod:`ragline.shared.worker.pending_vectors`)."""
    return int(db.one(conn.execute(PENDING_REEMBED_SQL, {"model": model, "tenant": tenant}))["n"])
