"""Which documents are kept out of the index (``ragline docs delete --exclude``): the one place that
decides it.

The ingest pool asks :func:`excluded` for every batch it is given, whatever sent it (``ragline
ingest``, a folder or git source's reindex or push, an upsert event, ``retry-failed``, a payload of a
producer), and again under each document's lock before storing it, so an exclusion recorded while a
document was being embedded still holds. A reindex asks it too, only to enqueue nothing it would
refuse. :func:`would_return` says where a deleted document would come back from, for the warning
of a plain ``docs delete``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

#: the reason an excluded document's ingest reports (the job's document row, the task's result)
EXCLUDED_ERROR = "excluded: kept out by `ragline docs delete --exclude` (`ragline docs include` lifts it)"


def excluded_pairs(conn: psycopg.Connection[Any], pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """The ``(tenant, doc_id)`` pairs of ``pairs`` that are kept out of the index."""
    if not pairs:
        return set()
    rows = conn.execute(
        "SELECT x.tenant, x.doc_id FROM document_exclusions x"
        " JOIN unnest(%s::text[], %s::text[]) AS p(tenant, doc_id) USING (tenant, doc_id)",
        ([t for t, _ in pairs], [d for _, d in pairs]),
    ).fetchall()
    return {(r["tenant"], r["doc_id"]) for r in rows}


def excluded(conn: psycopg.Connection[Any], tenant: str, doc_ids: list[str]) -> set[str]:
    """The doc ids of ``doc_ids`` the tenant keeps out of the index."""
    return {d for _, d in excluded_pairs(conn, [(tenant, d) for d in doc_ids])}


def exclude(conn: psycopg.Connection[Any], tenant: str, doc_ids: list[str], reason: str = "") -> None:
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO document_exclusions (tenant, doc_id, reason) VALUES (%s, %s, %s)"
            " ON CONFLICT (tenant, doc_id) DO UPDATE SET reason = EXCLUDED.reason",
            [(tenant, d, reason) for d in doc_ids],
        )


def include(conn: psycopg.Connection[Any], tenant: str, doc_ids: list[str]) -> list[str]:
    """Lift the exclusions of ``doc_ids``; the ones that were excluded."""
    rows = conn.execute(
        "DELETE FROM document_exclusions WHERE tenant = %s AND doc_id = ANY(%s) RETURNING doc_id",
        (tenant, list(doc_ids)),
    ).fetchall()
    return sorted(r["doc_id"] for r in rows)


def list_exclusions(conn: psycopg.Connection[Any], tenant: str) -> list[Any]:
    return conn.execute(
        "SELECT doc_id, reason, created_at FROM document_exclusions WHERE tenant = %s ORDER BY doc_id",
        (tenant,),
    ).fetchall()


def would_return(doc: dict, sources: list) -> str | None:
    """Where a document about to be deleted would come back from (pure), or None: its configured
    source (``RAGLINE_LIFECYCLE_SOURCES``) by name, else its file when it is still on disk. ``doc`` holds
    ``source_uri`` and ``metadata``; ``sources`` are the configured :class:`SourceSpec`s."""
    name = (doc.get("metadata") or {}).get("source")
    for spec in sources:
        if spec.name == name and spec.tenant == doc.get("tenant"):
            return f"it is in the configured source {name!r}, whose next reindex ingests it again"
    uri = doc.get("source_uri") or ""
    if uri and "://" not in uri and not uri.startswith("git:") and Path(uri).is_file():
        return f"its file {uri} is still there, and the next `ragline ingest` of its folder ingests it again"
    return None
