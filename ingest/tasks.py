"""Thin Celery tasks around the ingestion pipeline."""

from __future__ import annotations

import logging

import psycopg
from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError

from ingest import store
from ingest.pipeline import ingest_document
from shared import db, jobs
from shared import metrics as m
from shared.celery_app import app
from shared.contracts import TASK_INGEST_DOCUMENT, ErrorResult, IngestRequest, IngestResult
from shared.logging_setup import log_ingest
from shared.settings import get_settings

log = logging.getLogger(__name__)

_JOB_STATE = {"stored": "done", "stale": "skipped", "skipped_unchanged": "skipped", "failed": "failed"}
#: infrastructure errors: the task is retried (and redelivered if the worker dies)
TRANSIENT = (psycopg.OperationalError, ConnectionError, TimeoutError)


@app.task(name=TASK_INGEST_DOCUMENT, bind=True, acks_late=True, max_retries=5)
def ingest_document_task(self, payload: dict) -> dict:
    try:
        req = IngestRequest.model_validate(payload)
    except ValidationError as exc:
        return ErrorResult(error="invalid payload",
                           detail=exc.errors(include_url=False, include_input=False)).model_dump()
    try:
        result = ingest_document(req)
    except TRANSIENT as exc:
        raise self.retry(exc=exc, countdown=min(60, 2 ** self.request.retries)) from exc
    except (Exception, SoftTimeLimitExceeded) as exc:  # a bug or a hostile document: record, keep going
        log.exception("ingest of %s/%s failed", req.tenant, req.doc_id)
        error = f"internal: {type(exc).__name__}: {str(exc)[:500]}"
        with db.connection() as conn:
            store.mark_failed(conn, req.tenant, req.doc_id, req.uri, "internal", error, req.job_id)
        result = IngestResult(tenant=req.tenant, doc_id=req.doc_id, status="failed", error=error)
    m.DOCUMENTS_PROCESSED.labels(status=result.status).inc()
    m.CHUNKS_PROCESSED.inc(result.chunks)
    log_ingest(tenant=req.tenant, doc_id=req.doc_id, status=result.status, chunks=result.chunks,
               model=get_settings().embed_model_name, latency_ms=sum(result.timings_ms.values()), error=result.error)
    if req.job_id:
        with db.connection() as conn:
            jobs.record_document(conn, req.job_id, req.tenant, req.doc_id, _JOB_STATE[result.status],
                                 result.chunks, result.embedded, result.error)
    return result.model_dump()
