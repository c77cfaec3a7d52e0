"""Thin Celery tasks around the ingestion pipeline.

``ragline.ingest.document`` takes one document; ``ragline.ingest.batch`` takes several so that
their chunks share embedding batches. Both are idempotent (unchanged documents are skipped, vectors
come from the embedding cache), so ``acks_late`` redelivery after a worker dies is safe.
"""

from __future__ import annotations

import logging

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError

from ragline.ingest.pipeline import ingest_batch, record_failure
from ragline.shared import db, jobs, redelivery
from ragline.shared.celery_app import app
from ragline.shared.contracts import (
    TASK_INGEST_BATCH,
    TASK_INGEST_DOCUMENT,
    ErrorResult,
    IngestBatchRequest,
    IngestRequest,
    IngestResult,
)
from ragline.shared.logging_setup import log_ingest
from ragline.shared.metrics import CHUNKS_PROCESSED, DOCUMENTS_PROCESSED
from ragline.shared.providers import ProviderError
from ragline.shared.settings import get_settings
from ragline.shared.transient import INFRASTRUCTURE_ERRORS

log = logging.getLogger(__name__)

_JOB_STATE = {
    "stored": "done",
    "stale": "skipped",
    "skipped_unchanged": "skipped",
    "failed": "failed",
    "cancelled": "skipped",
}
#: infrastructure and provider outages: the task is retried (and redelivered if the worker dies)
TRANSIENT = (*INFRASTRUCTURE_ERRORS, ProviderError)
MAX_RETRIES = 20  # Celery's ceiling; the effective number is ``ingest_task_max_retries``


class PoisonTask(RuntimeError):
    """Recorded as the documents' error instead of a redelivery loop."""


def _run(task, reqs: list[IngestRequest]) -> list[IngestResult]:
    """Infrastructure errors outside the pipeline (cancel check, failure and job bookkeeping while
    Postgres restarts) retry the task too: escaping, they would fail it and, acked, lose the document."""
    try:
        return _run_once(task, reqs)
    except TRANSIENT as exc:
        if task.request.retries >= get_settings().ingest_task_max_retries:
            raise
        raise task.retry(exc=exc, countdown=min(60, 2**task.request.retries)) from exc


def _run_once(task, reqs: list[IngestRequest]) -> list[IngestResult]:
    job_ids = {r.job_id for r in reqs if r.job_id}
    if job_ids:  # documents of a cancelled job (`ragline cancel`) are skipped, not ingested
        with db.connection() as conn:
            cancelled = jobs.cancelled_jobs(conn, job_ids)
        if cancelled:
            rest = [r for r in reqs if r.job_id not in cancelled]
            live = iter(_run_once(task, rest) if rest else [])
            return [
                IngestResult(tenant=r.tenant, doc_id=r.doc_id, status="cancelled")
                if r.job_id in cancelled
                else next(live)
                for r in reqs
            ]
    try:
        lost = redelivery.worker_lost_count(task.request.id, task.request.retries)
        if lost >= get_settings().ingest_max_worker_lost:
            raise PoisonTask(f"the worker process died {lost} times running this task (poison document?)")
        results = ingest_batch(reqs)
    except TRANSIENT as exc:
        if task.request.retries < get_settings().ingest_task_max_retries:
            raise task.retry(exc=exc, countdown=min(60, 2**task.request.retries)) from exc
        stage = "embed" if isinstance(exc, ProviderError) else "internal"
        message = f"{stage}: {type(exc).__name__}: {str(exc)[:500]}"
        results = [record_failure(r, stage, message) for r in reqs]
    except (Exception, SoftTimeLimitExceeded) as exc:  # a bug or a hostile document: record, keep going
        log.exception("ingest of %d document(s) failed", len(reqs))
        message = f"internal: {type(exc).__name__}: {str(exc)[:500]}"
        results = [record_failure(r, "internal", message) for r in reqs]
    for req, result in zip(reqs, results, strict=True):
        DOCUMENTS_PROCESSED.labels(result.status).inc()
        if result.status == "stored":
            CHUNKS_PROCESSED.inc(result.chunks)
        log_ingest(
            tenant=req.tenant,
            doc_id=req.doc_id,
            status=result.status,
            chunks=result.chunks,
            model=get_settings().embed_model_name,
            latency_ms=sum(result.timings_ms.values()),
            error=result.error,
        )
        if req.job_id:
            with db.connection() as conn:
                jobs.record_document(
                    conn,
                    req.job_id,
                    req.tenant,
                    req.doc_id,
                    _JOB_STATE[result.status],
                    result.chunks,
                    result.embedded,
                    result.error,
                )
    return results


@app.task(name=TASK_INGEST_DOCUMENT, bind=True, acks_late=True, max_retries=MAX_RETRIES)
def ingest_document_task(self, payload: dict) -> dict:
    try:
        req = IngestRequest.model_validate(payload)
    except ValidationError as exc:
        return ErrorResult.invalid_payload(exc)
    return _run(self, [req])[0].model_dump()


@app.task(name=TASK_INGEST_BATCH, bind=True, acks_late=True, max_retries=MAX_RETRIES)
def ingest_batch_task(self, payload: dict) -> dict:
    try:
        batch = IngestBatchRequest.model_validate(payload)
    except ValidationError as exc:
        return ErrorResult.invalid_payload(exc)
    results = _run(self, batch.documents)
    return {"documents": [r.model_dump() for r in results]}
