"""Which documents are kept out of the index (``ragline docs delete --exclude``): the one place that
decides it.

An exclusion keeps out what the deleted document *was*, not only its name: its doc id, its source
(:func:`source_key`: the file's resolved path; a ``git:`` address as the file in that repository,
whatever commit; a URL without its fragment) and its content (the SHA-256 of its bytes, the
documents' ``content_hash``). An ingest whose doc id, source or bytes match one is refused, so the
same file upserted under another doc id, a copy of it in another folder or repository, or the same
bytes sent inline by a producer stay out too (a changed file at the same doc id or path as well).

The ingest pool asks :func:`excluded_pairs` for every batch it is given, whatever sent it (``ragline
ingest``, a folder or git source's reindex or push, an upsert event, ``retry-failed``, a payload of a
producer) by doc id and source, and again under each document's lock before storing it, by doc id,
source and content, so an exclusion recorded while a document was being embedded still holds. A
reindex asks it too, only to enqueue nothing it would refuse by doc id. :func:`would_return` says
where a deleted document would come back from, for the warning of a plain ``docs delete``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from ragline.ingest.parse import ParseError
from ragline.ingest.sources import parse_git_uri

#: the reason an excluded document's ingest reports (the job's document row, the task's result)
EXCLUDED_ERROR = "excluded: kept out by `ragline docs delete --exclude` (`ragline docs include` lifts it)"


def source_key(uri: str | None) -> str | None:
    """What an exclusion compares a document's source by (pure but for resolving symlinks): a local
    file's resolved path; a ``git:<repo>@<commit>:<path>`` address as ``<resolved repo>/<path>`` (the
    same key as the work tree's file, at any commit); a URL without its fragment; None for inline
    content."""
    if not uri:
        return None
    if uri.startswith("git:"):
        try:
            repo, _, path = parse_git_uri(uri)
        except ParseError:
            return uri
        return os.path.join(os.path.realpath(repo), path)
    if "://" in uri and not uri.startswith("file://"):
        return urlsplit(uri)._replace(fragment="").geturl()
    return os.path.realpath(uri.removeprefix("file://"))


def excluded_pairs(
    conn: psycopg.Connection[Any],
    pairs: list[tuple[str, str]],
    uris: Sequence[str | None] = (),
    hashes: Sequence[str | None] = (),
) -> set[tuple[str, str]]:
    """The ``(tenant, doc_id)`` pairs of ``pairs`` that are kept out of the index: by their doc id,
    their source (``uris``, beside ``pairs``, when given) or their content (``hashes``, when known)."""
    if not pairs:
        return set()
    n = len(pairs)
    sources = [source_key(u) for u in uris] if uris else [None] * n
    contents = list(hashes) if hashes else [None] * n
    rows = conn.execute(
        """
        SELECT p.tenant, p.doc_id FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[])
            AS p(tenant, doc_id, source, content_hash)
        WHERE EXISTS (SELECT 1 FROM document_exclusions x WHERE x.tenant = p.tenant AND x.doc_id = p.doc_id)
           OR EXISTS (SELECT 1 FROM document_exclusions x WHERE x.tenant = p.tenant AND x.source = p.source)
           OR EXISTS (SELECT 1 FROM document_exclusions x
                      WHERE x.tenant = p.tenant AND x.content_hash = p.content_hash)
        """,
        ([t for t, _ in pairs], [d for _, d in pairs], sources, contents),
    ).fetchall()
    return {(r["tenant"], r["doc_id"]) for r in rows}


def excluded(conn: psycopg.Connection[Any], tenant: str, doc_ids: list[str]) -> set[str]:
    """The doc ids of ``doc_ids`` the tenant keeps out of the index (by doc id alone)."""
    return {d for _, d in excluded_pairs(conn, [(tenant, d) for d in doc_ids])}


def exclude(conn: psycopg.Connection[Any], tenant: str, doc_ids: list[str], reason: str = "") -> None:
    """Keep ``doc_ids`` out, with the source and content their stored documents have now (a doc id
    not stored is kept out by its id alone)."""
    rows = conn.execute(
        "SELECT doc_id, source_uri, content_hash FROM documents"
        " WHERE tenant = %s AND doc_id = ANY(%s) AND status <> 'deleted'",
        (tenant, list(doc_ids)),
    ).fetchall()
    stored = {r["doc_id"]: (source_key(r["source_uri"]), r["content_hash"]) for r in rows}
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO document_exclusions (tenant, doc_id, reason, source, content_hash)"
            " VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (tenant, doc_id) DO UPDATE SET reason = EXCLUDED.reason,"
            " source = coalesce(EXCLUDED.source, document_exclusions.source),"
            " content_hash = coalesce(EXCLUDED.content_hash, document_exclusions.content_hash)",
            [(tenant, d, reason, *stored.get(d, (None, None))) for d in doc_ids],
        )


def also_stored(conn: psycopg.Connection[Any], tenant: str, doc_ids: list[str]) -> list[str]:
    """The tenant's stored documents, other than ``doc_ids``, with the content or the source address
    of one of ``doc_ids``: stored before the exclusion was made, they stay until deleted too."""
    rows = conn.execute(
        """
        SELECT o.doc_id FROM documents o
        WHERE o.tenant = %(t)s AND o.status <> 'deleted' AND NOT o.doc_id = ANY(%(ids)s)
          AND (o.content_hash IN (SELECT x.content_hash FROM document_exclusions x
                                  WHERE x.tenant = %(t)s AND x.doc_id = ANY(%(ids)s))
               OR o.source_uri IN (SELECT d.source_uri FROM documents d
                                   WHERE d.tenant = %(t)s AND d.doc_id = ANY(%(ids)s)))
        ORDER BY o.doc_id
        """,
        {"t": tenant, "ids": list(doc_ids)},
    ).fetchall()
    return [r["doc_id"] for r in rows]


def include(conn: psycopg.Connection[Any], tenant: str, doc_ids: list[str]) -> list[str]:
    """Lift the exclusions of ``doc_ids`` (their doc id, source and content alike); the ones that
    were excluded."""
    rows = conn.execute(
        "DELETE FROM document_exclusions WHERE tenant = %s AND doc_id = ANY(%s) RETURNING doc_id",
        (tenant, list(doc_ids)),
    ).fetchall()
    return sorted(r["doc_id"] for r in rows)


def list_exclusions(conn: psycopg.Connection[Any], tenant: str) -> list[Any]:
    return conn.execute(
        "SELECT doc_id, source, content_hash, reason, created_at FROM document_exclusions"
        " WHERE tenant = %s ORDER BY doc_id",
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
