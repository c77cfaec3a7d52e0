"""Thin Celery tasks for the document lifecycle: permission sync, document events, re-embedding.

``ragline.acl.sync`` and ``ragline.ingest.event`` run on the ``acl`` queue (the small control
pool), so a permission change or a delete never waits behind long ingestion work.
``ragline.ingest.reembed`` runs on the ingest pool, which owns the embedder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from ragline.shared import db, jobs
from ragline.shared.celery_app import app
from ragline.shared.contracts import (
    TASK_ACL_SYNC,
    TASK_INGEST_EVENT,
    TASK_INGEST_REEMBED,
    AclSyncRequest,
    AclSyncResult,
    ErrorResult,
    IngestEvent,
)
from ragline.shared.metrics import ACL_SYNC_LAG_S
from ragline.shared.settings import get_settings
from ragline.shared.transient import INFRASTRUCTURE_ERRORS

log = logging.getLogger(__name__)

TRANSIENT = INFRASTRUCTURE_ERRORS


def run_acl_sync(req: AclSyncRequest, record: bool = True) -> AclSyncResult:
    """Apply a request in batches; record the lag per applied item and one job row per request."""
    from ragline.ingest.acl_sync import apply_acl_sync

    size = get_settings().acl_sync_batch_size
    totals = {"documents_updated": 0, "chunks_updated": 0, "ignored_stale": 0}
    lags: list[float] = []
    with db.connection() as conn:
        for i in range(0, len(req.items), size):
            out = apply_acl_sync(conn, req.items[i : i + size])
            totals["documents_updated"] += out.documents_updated
            totals["chunks_updated"] += out.chunks_updated
            totals["ignored_stale"] += out.ignored_stale
            lags += out.lags_s
        for lag in lags:
            ACL_SYNC_LAG_S.observe(lag)
        result = AclSyncResult(
            items=len(req.items),
            **totals,
            lag_s_max=round(max(lags), 4) if lags else None,
            lag_s_mean=round(sum(lags) / len(lags), 4) if lags else None,
        )
        if record:
            tenants = {it.tenant for it in req.items}
            result.job_id = jobs.record_job(
                conn,
                "acl_sync",
                tenants.pop() if len(tenants) == 1 else None,
                result.model_dump(exclude={"job_id"}),
                total=len(req.items),
            )
    return result


def _apply(task, model: type[BaseModel], payload: object, fn: Callable[[Any], BaseModel]) -> dict:
    """Validate (a bad payload gets an ``ErrorResult``), run, and retry on infrastructure errors:
    both tasks are idempotent, so a retry re-applies only what is still older."""
    try:
        req = model.model_validate(payload)
    except ValidationError as exc:
        return ErrorResult.invalid_payload(exc)
    try:
        return fn(req).model_dump()
    except TRANSIENT as exc:
        raise task.retry(exc=exc, countdown=min(30, 2**task.request.retries)) from exc


@app.task(name=TASK_ACL_SYNC, bind=True, acks_late=True, max_retries=5)
def acl_sync_task(self, payload: dict) -> dict:
    return _apply(self, AclSyncRequest, payload, run_acl_sync)


def _send(name: str, payload: dict) -> str:
    return app.send_task(name, args=[payload]).id


@app.task(name=TASK_INGEST_EVENT, bind=True, acks_late=True, max_retries=5)
def ingest_event_task(self, payload: dict) -> dict:
    from ragline.ingest.events import handle_event

    def apply(ev: IngestEvent) -> BaseModel:
        with db.connection() as conn:
            return handle_event(conn, ev, _send)

    return _apply(self, IngestEvent, payload, apply)


@app.task(name=TASK_INGEST_REEMBED, bind=True, acks_late=True)
def reembed_task(self, payload: dict | None = None) -> dict:
    """Re-embed chunks whose embed_model differs from the configured model (one runner at a time)."""
    from ragline.ingest.reembed import run_reembed

    payload = payload or {}
    return run_reembed(job_id=payload.get("job_id"), tenant=payload.get("tenant"))
