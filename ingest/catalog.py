"""What a tenant has indexed: listing, inspecting and deleting documents (``ragline docs``).

Queries over a connection the caller owns; the command line only formats what they return. Every
statement names the tenant in its WHERE clause. A document is matched by its doc id, and a prefix
by ``starts_with`` (no LIKE pattern to escape). Tombstones (``status = 'deleted'``, left by a
delete so that a late older upsert stays stale) are hidden unless asked for by status.

Deleting goes through the same function as a ``delete`` event (``events.delete_document``: the
document's advisory lock, the version check, the tombstone), at the version that is stored when the
command looks: the document as it is now is removed, a newer version written meanwhile by an
ingest or an event is kept (and reported), and ingesting the same file again brings it back.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import DictRow

from ragline.ingest.events import delete_document
from ragline.shared.worker import db

#: what ``docs list`` shows per document
LIST_COLUMNS = (
    "doc_id, status, chunk_count AS chunks, acl, version, title, error, created_at, updated_at,"
    " metadata->>'source' AS source"
)

#: a listing without a status filter: everything but tombstones
LIVE = ("ready", "pending", "failed")


def _where(prefix: str | None, statuses: tuple[str, ...] | None) -> tuple[str, dict]:
    params: dict = {"prefix": prefix, "statuses": list(statuses or LIVE)}
    sql = "tenant = %(tenant)s AND status = ANY(%(statuses)s)"
    if prefix:
        sql += " AND starts_with(doc_id, %(prefix)s)"
    return sql, params


def list_documents(
    conn: psycopg.Connection[DictRow],
    tenant: str,
    prefix: str | None = None,
    statuses: tuple[str, ...] | None = None,
    limit: int = 50,
    after: str | None = None,
) -> list[dict]:
    """One page of the tenant's documents in doc id order, after the doc id ``after`` (a cursor:
    pages stay consistent while documents are added or deleted, unlike an offset)."""
    where, params = _where(prefix, statuses)
    params.update(tenant=tenant, after=after, limit=limit)
    if after is not None:
        where += " AND doc_id > %(after)s"
    return conn.execute(
        f"SELECT {LIST_COLUMNS} FROM documents WHERE {where} ORDER BY doc_id LIMIT %(limit)s", params
    ).fetchall()


def count_documents(
    conn: psycopg.Connection[DictRow],
    tenant: str,
    prefix: str | None = None,
    statuses: tuple[str, ...] | None = None,
) -> int:
    where, params = _where(prefix, statuses)
    params["tenant"] = tenant
    return int(db.one(conn.execute(f"SELECT count(*) AS n FROM documents WHERE {where}", params))["n"])


def tenant_known(conn: psycopg.Connection[DictRow], tenant: str) -> bool:
    """Whether the tenant has any document row at all (tombstones and pending permissions included):
    an empty listing of an unknown tenant is most likely a misspelt name."""
    return conn.execute("SELECT 1 FROM documents WHERE tenant = %s LIMIT 1", (tenant,)).fetchone() is not None


#: the last job that touched one document (index ``job_documents_by_document``, migration 0011)
LAST_JOB_SQL = (
    "SELECT jd.job_id::text AS job_id, j.kind, j.state AS job_state, jd.state, jd.error, jd.updated_at"
    " FROM job_documents jd JOIN jobs j ON j.id = jd.job_id"
    " WHERE jd.tenant = %s AND jd.doc_id = %s ORDER BY jd.updated_at DESC LIMIT 1"
)


def get_document(conn: psycopg.Connection[DictRow], tenant: str, doc_id: str) -> dict | None:
    """Everything stored about one document: its row, the chunks actually stored, its open errors
    and the last job that touched it; None when the tenant holds no such doc id."""
    doc = conn.execute(
        "SELECT tenant, doc_id, status, title, path, layer, source_uri, metadata, content_hash, version,"
        " acl, ingest_acl, acl_versions, embed_model, chunk_count, error, created_at, updated_at,"
        " (SELECT count(*) FROM chunks c WHERE c.tenant = d.tenant AND c.doc_id = d.doc_id) AS chunks_stored"
        " FROM documents d WHERE tenant = %s AND doc_id = %s",
        (tenant, doc_id),
    ).fetchone()
    if doc is None:
        return None
    doc["open_errors"] = conn.execute(
        "SELECT stage, error, job_id::text AS job_id, created_at FROM document_errors"
        " WHERE tenant = %s AND doc_id = %s AND NOT resolved ORDER BY created_at DESC LIMIT 5",
        (tenant, doc_id),
    ).fetchall()
    doc["last_job"] = conn.execute(LAST_JOB_SQL, (tenant, doc_id)).fetchone()
    return doc


def origins(conn: psycopg.Connection[DictRow], tenant: str, doc_ids: list[str]) -> list[dict]:
    """Where each of the (not deleted) documents came from: its file or URL and its source metadata."""
    return conn.execute(
        "SELECT tenant, doc_id, source_uri, metadata FROM documents"
        " WHERE tenant = %s AND doc_id = ANY(%s) AND status <> 'deleted'",
        (tenant, list(doc_ids)),
    ).fetchall()


def doc_ids_under(conn: psycopg.Connection[DictRow], tenant: str, prefix: str) -> list[str]:
    """The doc ids (not tombstones) starting with ``prefix``: what ``docs delete --prefix`` removes."""
    rows = conn.execute(
        "SELECT doc_id FROM documents WHERE tenant = %s AND status <> 'deleted' AND starts_with(doc_id, %s)"
        " ORDER BY doc_id",
        (tenant, prefix),
    ).fetchall()
    return [r["doc_id"] for r in rows]


def delete_documents(conn: psycopg.Connection[DictRow], tenant: str, doc_ids: list[str]) -> dict:
    """Delete each document (its chunks; a tombstone stays) at its stored version, one transaction
    each. ``conn`` must be in autocommit mode, so every document commits on its own and a failure
    leaves the ones before it deleted.

    Returns ``deleted`` ({doc_id, chunks}), ``not_found`` (no such doc id, or already deleted) and
    ``changed`` (a newer version was stored between the look-up and the delete: kept)."""
    out: dict[str, list] = {"deleted": [], "not_found": [], "changed": []}
    for doc_id in dict.fromkeys(doc_ids):
        row = conn.execute(
            "SELECT version, status FROM documents WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
        ).fetchone()
        if row is None or row["status"] == "deleted":
            out["not_found"].append(doc_id)
            continue
        outcome, chunks = delete_document(conn, tenant, doc_id, row["version"])
        if outcome == "deleted":
            out["deleted"].append({"doc_id": doc_id, "chunks": chunks})
        elif outcome == "ignored_duplicate" or _is_deleted(conn, tenant, doc_id):
            out["not_found"].append(doc_id)  # deleted by an event meanwhile
        else:
            out["changed"].append(doc_id)
    return out


def _is_deleted(conn: psycopg.Connection[DictRow], tenant: str, doc_id: str) -> bool:
    row = conn.execute(
        "SELECT status FROM documents WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
    ).fetchone()
    return row is not None and row["status"] == "deleted"
