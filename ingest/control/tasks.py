"""Thin Celery tasks of the control pool: permission sync, document events, the scheduled
reindex, stuck-job detection and retention.

They run on the ``acl`` and ``maintenance`` queues, so a permission change or a delete never waits
behind long ingestion work. Nothing here embeds: the control pool never loads a model (an import
contract checks it), and a changed document is sent to the ingest pool as a task. Beat sends each
tick with an ``expires``, so ticks nobody picked up in time are dropped instead of piling up; a
reindex still running when the next tick arrives makes that tick a no-op (advisory lock in
``ingest/control/reindex.py``). Validation and infrastructure retries come from the base task.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel

from ragline.ingest.acl_sync import STALE_SHOWN, ChangeRefused, apply_acl_sync
from ragline.ingest.control.reindex import TOTALS, reindex, select_sources
from ragline.ingest.control.retention import purge
from ragline.ingest.events import handle_event
from ragline.ingest.store import pending_reembed
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import AclSyncRequest, AclSyncResult, ErrorResult, EventResult, IngestEvent
from ragline.shared.sdk.names import (
    TASK_ACL_SYNC,
    TASK_INGEST_EVENT,
    TASK_INGEST_FILL_VECTORS,
    TASK_INGEST_REEMBED,
    TASK_PURGE,
    TASK_REINDEX,
    TASK_STUCK_JOBS,
)
from ragline.shared.sdk.sender import UNSIGNED, sender_of
from ragline.shared.worker import db, jobs, pending_vectors, replicas
from ragline.shared.worker.celery_app import app, send
from ragline.shared.worker.metrics import ACL_SYNC_LAG_S, JOBS_STUCK

log = logging.getLogger(__name__)


def run_acl_sync(req: AclSyncRequest, record: bool = True, sender: str = UNSIGNED) -> AclSyncResult:
    """Apply a request in batches; record the lag per applied item and one job row per request.
    ``sender``: who sent it, as the worker verified it (``shared/sdk/sender.py``)."""
    size = get_settings().lifecycle.acl_sync_batch_size
    totals = {"documents_updated": 0, "chunks_updated": 0, "ignored_stale": 0, "pending": 0, "forced": 0}
    not_found: list[dict] = []
    stale: list[dict] = []
    unknown: set[str] = set()
    lags: list[float] = []
    with db.connection() as conn:
        for i in range(0, len(req.items), size):
            out = apply_acl_sync(
                conn,
                req.items[i : i + size],
                pending=req.missing == "pending",
                sender=sender,
                force=req.force,
            )
            totals["documents_updated"] += out.documents_updated
            totals["chunks_updated"] += out.chunks_updated
            totals["ignored_stale"] += out.ignored_stale
            totals["pending"] += out.pending
            totals["forced"] += out.forced
            stale += out.stale[: STALE_SHOWN - len(stale)]
            not_found += out.not_found
            unknown.update(out.unknown_tenants)
            lags += out.lags_s
        # reported done only once the query pool's replicas serve the change (or are out of rotation)
        wait = replicas.wait_for_replay(conn) if totals["documents_updated"] or totals["pending"] else None
        for lag in lags:
            ACL_SYNC_LAG_S.observe(lag)
        result = AclSyncResult(
            items=len(req.items),
            **totals,
            not_found=not_found,
            stale=stale,
            unknown_tenants=sorted(unknown),
            lag_s_max=round(max(lags), 4) if lags else None,
            lag_s_mean=round(sum(lags) / len(lags), 4) if lags else None,
            replicas=wait.as_dict() if wait else None,
        )
        if record:
            tenants = {it.tenant for it in req.items}
            result.job_id = jobs.record_job(
                conn,
                "acl_sync",
                tenants.pop() if len(tenants) == 1 else None,
                result.model_dump(exclude={"job_id"}) | {"sender": sender, "force": req.force},
                total=len(req.items),
            )
    return result


def run_reindex(source_names: list[str] | None = None, kind: str = "reindex", reembed: bool = False) -> dict:
    """List every configured source (or the named ones), enqueue new/changed, prune vanished; with
    ``reembed`` also start a background re-embedding when chunks carry another model than the configured one."""
    settings = get_settings()
    specs = select_sources(settings.lifecycle.sources, source_names)
    with db.connection() as conn:
        out = (
            reindex(conn, specs, send, http_timeout=settings.lifecycle.http_source_timeout_s, kind=kind)
            if specs
            else {"job_id": None, "state": "succeeded", "sources": {}, **dict.fromkeys(TOTALS, 0)}
        )
        stale = pending_reembed(conn, settings.embed.model_name) if reembed else 0
        # rows whose fill was lost (a worker died, the embedder was down): the fill picks them up
        awaiting = sum(pending_vectors.by_tenant(conn).values()) if reembed else 0
    if stale:
        out["reembed_task"] = send(TASK_INGEST_REEMBED, {})
        out["reembed_pending"] = stale
    if awaiting:
        out["fill_task"] = send(TASK_INGEST_FILL_VECTORS, {})
        out["awaiting_vectors"] = awaiting
    log.info("reindex: %s", {k: v for k, v in out.items() if k != "sources"})
    return out


@app.task(name=TASK_ACL_SYNC, payload_model=AclSyncRequest, bind=True)
def acl_sync_task(self, req: AclSyncRequest) -> dict:
    try:
        return run_acl_sync(req, sender=sender_of(self.request)).model_dump()
    except ChangeRefused as exc:
        return ErrorResult(error="refused", detail=str(exc)).model_dump()


@app.task(name=TASK_INGEST_EVENT, payload_model=IngestEvent, bind=True)
def ingest_event_task(self, ev: IngestEvent) -> dict:
    """Idempotent: a replayed or out-of-order event is recognised by its version and ignored."""
    with db.connection() as conn:
        result: BaseModel = handle_event(conn, ev, send, sender=sender_of(self.request))
        if isinstance(result, EventResult) and (
            result.outcome in ("deleted", "acl_applied") or result.acl_outcome == "applied"
        ):  # a delete or a permission change: done once the query pool's replicas serve it
            wait = replicas.wait_for_replay(conn, what=f"{ev.type} event")
            result.replicas = wait.as_dict() if wait else None
    return result.model_dump()


@app.task(name=TASK_REINDEX)
def reindex_task(payload: dict | None = None) -> dict:
    """Scheduled (beat, no payload: also checks for a model change) or on-demand (``ragline reindex``)."""
    if payload is None:
        return run_reindex(reembed=True)
    return run_reindex(
        payload.get("sources"),
        kind=payload.get("kind", "reindex"),
        reembed=bool(payload.get("reembed", False)),
    )


@app.task(name=TASK_STUCK_JOBS)
def stuck_jobs_task(payload: dict | None = None) -> dict:
    """Mark running jobs without a recent heartbeat as failed ('stuck: ...')."""
    older = float((payload or {}).get("older_than_s") or get_settings().lifecycle.job_stuck_after_s)
    with db.connection() as conn:
        marked = jobs.mark_stuck(conn, older)
    for j in marked:
        log.warning("job %s (%s) marked stuck: %s", j["id"], j["kind"], j["error"])
    JOBS_STUCK.inc(len(marked))
    return {"marked": marked}


@app.task(name=TASK_PURGE)
def purge_task(payload: dict | None = None) -> dict:
    """Retention (beat, daily by default); the payload may override the ages in days."""
    s = get_settings()
    p = payload or {}
    with db.connection() as conn:
        out = purge(
            conn,
            float(p.get("tombstone_days") or s.lifecycle.tombstone_retention_days),
            float(p.get("job_days") or s.lifecycle.job_retention_days),
        )
    log.info("purge: %s", out)
    return out
