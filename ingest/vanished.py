"""Open errors of files that are gone: settled when their folder is listed again.

A file that failed and was then removed from its folder would otherwise keep its error in
``ragline errors`` and its ``failed`` row in ``docs list`` until someone deletes the doc id, and
``retry-failed`` would try it again and fail ("ACL unknown"). Every path that lists a folder again
calls :func:`settle_vanished` with what it listed: ``ragline ingest FOLDER`` (and ``ragline demo``)
and the reindex of a folder source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from ragline.ingest.events import delete_document
from ragline.shared.worker import db, jobs

#: open errors of a source's documents that were not listed again: the URI each error recorded
#: and the document's status ('ready': a good version is stored and keeps serving)
_OPEN_ERRORS_OF_SOURCE = """
SELECT DISTINCT ON (e.doc_id) e.doc_id, e.source_uri, d.status
FROM document_errors e JOIN documents d ON d.tenant = e.tenant AND d.doc_id = e.doc_id
WHERE e.tenant = %s AND NOT e.resolved AND starts_with(e.doc_id, %s) AND NOT (e.doc_id = ANY(%s))
ORDER BY e.doc_id, e.created_at DESC
"""


def file_gone(uri: str | None) -> bool:
    """Whether an error's URI names a local file that no longer exists. A URL or a git object is not
    judged here: its source's own listing decides (a reindex prunes what it no longer lists)."""
    if not uri or "://" in uri or uri.startswith("git:"):
        return False
    return not Path(uri).exists()


def settle_vanished(conn: psycopg.Connection[Any], tenant: str, source: str, listed: set[str]) -> list[str]:
    """Resolve the open errors of ``source``'s documents that were not ``listed`` and whose file is
    gone. A document that never stored a good version becomes a tombstone (the delete path, so no
    ``failed`` row stays for a file that is not there); one that did keeps serving that version
    until it is deleted. Returns the doc ids settled."""
    rows = conn.execute(_OPEN_ERRORS_OF_SOURCE, (tenant, f"{source}/", sorted(listed))).fetchall()
    settled = []
    for r in rows:
        if not file_gone(r["source_uri"]):
            continue
        if r["status"] == "ready":
            jobs.resolve_errors(conn, tenant, r["doc_id"])
        else:
            delete_document(conn, tenant, r["doc_id"], None)
        settled.append(r["doc_id"])
    conn.commit()
    return settled


def settle_folders(tenant: str, sources: dict[str, set[str]]) -> list[str]:
    """:func:`settle_vanished` for each source of a ``ragline ingest`` (source -> doc ids listed)."""
    with db.connection() as conn:
        return [
            d for source, listed in sources.items() for d in settle_vanished(conn, tenant, source, listed)
        ]
