"""Document events from a webhook or an upstream queue: upsert, delete, acl.

Every event carries the source's version, so a duplicate or an out-of-order event is harmless:
an upsert older than (or equal to) what is stored is ignored, a delete older than the stored
version is ignored, and a delete leaves a ``status = 'deleted'`` row (a tombstone) without
chunks whose version makes a late older upsert stale in ``ingest/store.py``.

Permissions (an ``acl`` event, the ``acl`` of an upsert) go through the ACL path at once, ordered
on the server's clock; the event's version only drops replays and older changes of the same
producer (``ingest/acl_sync.py``). An upsert's ingest then stores content only.

No embedder import here: events are handled by the control pool; an upsert only enqueues the
ingestion task on the ingest queue.
"""

from __future__ import annotations

import psycopg

from ragline.ingest import store
from ragline.ingest.acl_sync import apply_acl_sync, clock
from ragline.shared import jobs
from ragline.shared.contracts import AclSyncItem, EventResult, IngestEvent, IngestRequest
from ragline.shared.names import TASK_INGEST_DOCUMENT


def delete_document(
    conn: psycopg.Connection, tenant: str, doc_id: str, version: int | None
) -> tuple[str, int]:
    """Remove a document's chunks and leave a tombstone. ``version`` None deletes unconditionally
    (a reindex prune: the source no longer lists the document). Returns (outcome, chunks deleted).

    A document ingested again after its deletion takes that ingest's permissions (unless a permission
    change reaches the tombstone first); the producers' ACL versions are kept to drop their replays."""
    with conn.transaction():
        store.lock_document(conn, tenant, doc_id)
        state = store.current_state(conn, tenant, doc_id)
        if version is not None and state is not None and state["version"] > version:
            return "ignored_stale", 0
        if (
            version is not None
            and state is not None
            and state["status"] == "deleted"
            and state["version"] == version
        ):
            return "ignored_duplicate", 0
        deleted = conn.execute(
            "DELETE FROM chunks WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
        ).rowcount
        keep_version = max(version or 0, state["version"] if state else 0)
        conn.execute(
            """
            INSERT INTO documents (tenant, doc_id, version, status, chunk_count)
            VALUES (%s, %s, %s, 'deleted', 0)
            ON CONFLICT (tenant, doc_id) DO UPDATE SET status = 'deleted', version = EXCLUDED.version,
                chunk_count = 0, content_hash = NULL, error = NULL, updated_at = now(),
                ingest_acl = NULL, acl_seq = 0
            """,
            (tenant, doc_id, keep_version),
        )
        jobs.resolve_errors(conn, tenant, doc_id)
    return "deleted", deleted


def upsert_decision(state: dict | None, version: int) -> str | None:
    """Why an upsert at ``version`` must be ignored, or None to ingest it (pure)."""
    if state is None:
        return None
    if state["version"] > version:
        return "ignored_stale"
    if state["version"] == version and state["status"] in ("ready", "deleted"):
        return "ignored_duplicate"  # the same version is stored, or was deleted at this version
    return None


def handle_event(conn: psycopg.Connection, ev: IngestEvent, send_task) -> EventResult:
    """Apply one event. ``send_task(name, payload) -> task id`` enqueues the ingestion of an upsert."""
    base = {"type": ev.type, "tenant": ev.tenant, "doc_id": ev.doc_id}
    if ev.type == "delete":
        outcome, n = delete_document(conn, ev.tenant, ev.doc_id, ev.version)
        return EventResult(**base, outcome=outcome, chunks_deleted=n)
    if ev.type == "acl":
        out = apply_acl_sync(conn, [event_acl(ev)], path="event")
        return EventResult(**base, outcome="acl_applied" if out.documents_updated else "ignored_stale")
    acl_outcome = None
    if ev.acl is not None:  # the permissions take effect now, whatever the content turns out to be
        out = apply_acl_sync(conn, [event_acl(ev)], path="event")
        acl_outcome = "applied" if out.documents_updated else "ignored_stale"
    state = store.current_state(conn, ev.tenant, ev.doc_id)
    reason = upsert_decision(state, ev.version)
    if reason:
        return EventResult(**base, outcome=reason, acl_outcome=acl_outcome)
    # an upsert without 'acl' asks for what the last ingest asked for (new documents get none:
    # invisible); the request's clock is now, so a permission change applied later wins over it
    acl = (
        ev.acl
        if ev.acl is not None
        else list(state["ingest_acl"] if state["ingest_acl"] is not None else state["acl"])
        if state
        else []
    )
    req = IngestRequest(
        tenant=ev.tenant,
        doc_id=ev.doc_id,
        uri=ev.uri,
        path=ev.path or ev.doc_id,
        layer=ev.layer,
        fmt=ev.fmt,
        acl=acl,
        version=ev.version,
        acl_seq=clock(conn),
    )
    task_id = send_task(TASK_INGEST_DOCUMENT, req.model_dump(exclude_none=True))
    return EventResult(**base, outcome="enqueued", task_id=task_id, acl_outcome=acl_outcome)


def event_acl(ev: IngestEvent) -> AclSyncItem:
    """The permission change an event carries, from its producer (default ``events``) at its version."""
    # built without validation: an upsert's version may be 0, which a sync item does not accept
    return AclSyncItem.model_construct(
        tenant=ev.tenant,
        doc_id=ev.doc_id,
        path_prefix=None,
        acl=list(ev.acl or []),
        version=ev.version,
        ts=ev.ts,
        producer=ev.producer or "events",
    )
