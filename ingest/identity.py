"""Which source a doc id belongs to, so that one source never overwrites another's document.

A request that names its source (``metadata.source``: ``ragline ingest`` and the configured sources
do; events and direct task payloads choose their doc ids themselves and do not) may write a doc id
only when nothing is stored under it, or what is stored came from the same source, from the same
folder when both recorded one (``metadata.source_root``), or, for a document stored without a source
(before ids had a source prefix, or by an event), from the same file. A source name whose recorded
folder no longer exists has moved, and may write from its new folder. Otherwise the document is
refused: the error is recorded (``ragline errors``, the job's summary) and the stored document is
left exactly as it was. The check runs before the document is parsed and again under the
document's lock before it is written.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg.rows import DictRow

from ragline.shared.sdk.contracts import IngestRequest, IngestResult
from ragline.shared.worker import db

STAGE = "identity"


class IdentityConflict(Exception):
    """The doc id holds another source's document (deliberately not a ``ValueError``: the pipeline
    records those as the document's own failure, which would touch the stored document)."""


def conflict(
    owner: dict | None, source: str | None, root: str | None, uri: str | None, owner_root_exists: bool = True
) -> str | None:
    """Why a document from ``source`` (folder ``root``, file ``uri``) may not be written over ``owner``
    (the stored row: status, content_hash, source_uri, source, source_root), or None (pure).
    ``owner_root_exists`` False (the owner's folder is gone) means the source's folder moved."""
    if source is None or owner is None or owner["status"] == "deleted" or owner["content_hash"] is None:
        return None  # the caller manages its ids, or nothing is stored under the id
    theirs, where = owner.get("source"), owner.get("source_uri") or "inline content"
    if theirs is None:
        if owner.get("source_uri") == uri:
            return None  # the same file, stored before it had a source
        return f"it already holds {where} (stored without a source)"
    if theirs != source:
        return f"it belongs to source {theirs!r} ({where})"
    if root and owner.get("source_root") and owner["source_root"] != root and owner_root_exists:
        return f"source {source!r} already stored it from the folder {owner['source_root']} ({where})"
    return None


def check(conn: psycopg.Connection[DictRow], req: IngestRequest) -> None:
    """Raise :class:`IdentityConflict` when ``req`` may not write its doc id."""
    if req.metadata.get("source") is None:
        return
    owner = conn.execute(
        "SELECT status, content_hash, source_uri, metadata->>'source' AS source,"
        " metadata->>'source_root' AS source_root FROM documents WHERE tenant = %s AND doc_id = %s",
        (req.tenant, req.doc_id),
    ).fetchone()
    check_owner(owner, req)


def check_owner(owner: dict | None, req: IngestRequest) -> None:
    """Raise :class:`IdentityConflict` when ``req`` may not write over ``owner``, the stored row
    (status, content_hash, source_uri, source, source_root; None: nothing stored) its caller read,
    under the document's lock when it is about to write."""
    source = req.metadata.get("source")
    if source is None:
        return
    root = req.metadata.get("source_root")
    moved = bool(
        owner and owner["source_root"] and owner["source_root"] != root and not _is_dir(owner["source_root"])
    )
    reason = conflict(owner, str(source), str(root) if root else None, req.uri, not moved)
    if reason:
        raise IdentityConflict(
            f"{STAGE}: doc id {req.doc_id!r} not written: {reason}; this document "
            f"({req.uri or 'inline content'}, source {source!r}) was refused. Ingest its folder "
            "under another --source name, or delete the stored document first"
        )


def _is_dir(path: str) -> bool:
    try:
        return Path(path).is_dir()
    except OSError:
        return True  # unreadable is not "gone": keep refusing


def record_refusal(req: IngestRequest, message: str) -> IngestResult:
    """Record the refusal as an open error of the doc id without touching the stored document."""
    with db.connection() as conn:
        conn.execute(
            "INSERT INTO document_errors (job_id, tenant, doc_id, source_uri, stage, error)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (req.job_id, req.tenant, req.doc_id, req.uri, STAGE, message),
        )
    return IngestResult(tenant=req.tenant, doc_id=req.doc_id, status="failed", error=message)
