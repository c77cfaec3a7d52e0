"""Thin Celery tasks of the ingest pool around the ingestion pipeline.

``ragline.ingest.document`` takes one document; ``ragline.ingest.batch`` takes several so that
their chunks share embedding batches; ``ragline.ingest.reembed`` re-embeds after a model change;
``ragline.ingest.fill_vectors`` embeds the rows a batch stored before their vectors, a few batches
at a time, sending itself again while rows remain (queued ingest batches run in between).
All are idempotent (unchanged documents are skipped, vectors come from the embedding cache), so
``acks_late`` redelivery after a worker dies and the base task's retries are safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from celery.exceptions import SoftTimeLimitExceeded

from ragline.ingest.chunk import chunk_blocks
from ragline.ingest.parse import parse_bytes
from ragline.ingest.pipeline import ingest_batch, record_failure
from ragline.ingest.reembed import run_fill, run_reembed
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import IngestBatchRequest, IngestRequest, IngestResult
from ragline.shared.sdk.names import (
    TASK_INGEST_BATCH,
    TASK_INGEST_DOCUMENT,
    TASK_INGEST_FILL_VECTORS,
    TASK_INGEST_REEMBED,
)
from ragline.shared.worker import db, jobs, redelivery, warmup
from ragline.shared.worker.celery_app import app
from ragline.shared.worker.logging_setup import log_ingest
from ragline.shared.worker.metrics import CHUNKS_PROCESSED, DOCUMENTS_PROCESSED
from ragline.shared.worker.providers import ProviderError
from ragline.shared.worker.task_base import RaglineTask
from ragline.shared.worker.transient import INFRASTRUCTURE_ERRORS

log = logging.getLogger(__name__)

_JOB_STATE = {
    "stored": "done",
    "stale": "skipped",
    "skipped_unchanged": "skipped",
    "failed": "failed",
    "cancelled": "skipped",
    "excluded": "skipped",
}
#: infrastructure and provider outages: the task is retried (and redelivered if the worker dies)
TRANSIENT = (*INFRASTRUCTURE_ERRORS, ProviderError)


class IngestTask(RaglineTask):
    """Retries provider outages too, as many times as ``ingest.task_max_retries`` says; after the
    last one the documents are recorded as failed instead of the task failing."""

    autoretry_for = TRANSIENT

    @property
    def max_retries(self) -> int:
        return get_settings().ingest.task_max_retries


class PoisonTask(RuntimeError):
    """Recorded as the documents' error instead of a redelivery loop."""


def _run(task: IngestTask, reqs: list[IngestRequest]) -> list[IngestResult]:
    """Ingest, count and record; an outage escapes to the base task's retry until the last attempt,
    which records the documents as failed, so an acknowledged task never loses a document silently."""
    job_ids = {r.job_id for r in reqs if r.job_id}
    if job_ids:  # documents of a cancelled job (`ragline cancel`) are skipped, not ingested
        with db.connection() as conn:
            cancelled = jobs.cancelled_jobs(conn, job_ids)
        if cancelled:
            rest = [r for r in reqs if r.job_id not in cancelled]
            live = iter(_run(task, rest) if rest else [])
            return [
                IngestResult(tenant=r.tenant, doc_id=r.doc_id, status="cancelled")
                if r.job_id in cancelled
                else next(live)
                for r in reqs
            ]
    settled: dict[int, IngestResult] = {}  # reported as they become final: the job's progress

    fill = _fill_once()

    def finish(i: int, result: IngestResult) -> None:
        settled[i] = result
        _record(reqs[i], result)
        fill(result)

    try:
        lost = redelivery.worker_lost_count(task.request.id, task.request.retries)
        if lost >= get_settings().workers.ingest_max_worker_lost:
            raise PoisonTask(f"the worker process died {lost} times running this task (poison document?)")
        results = ingest_batch(reqs, on_result=finish, on_alive=lambda: _heartbeat(job_ids))
    except TRANSIENT as exc:
        if task.request.retries < task.max_retries:
            raise  # retried by the base task, with backoff
        stage = "embed" if isinstance(exc, ProviderError) else "internal"
        message = f"{stage}: {type(exc).__name__}: {str(exc)[:500]}"
        results = _fail_unfinished(reqs, settled, stage, message)
    except (Exception, SoftTimeLimitExceeded) as exc:  # a bug or a hostile document: record, keep going
        log.exception("ingest of %d document(s) failed", len(reqs))
        message = f"internal: {type(exc).__name__}: {str(exc)[:500]}"
        results = _fail_unfinished(reqs, settled, "internal", message)
    for i, result in enumerate(results):
        if i not in settled:
            finish(i, result)
    _warn_visible_to_no_group(reqs, results)
    return results


def _fail_unfinished(
    reqs: list[IngestRequest], settled: dict[int, IngestResult], stage: str, message: str
) -> list[IngestResult]:
    """After the batch failed as a whole: the documents without a result yet are recorded as failed;
    the ones already reported (stored, unchanged, failed alone) keep theirs."""
    return [settled.get(i) or record_failure(r, stage, message) for i, r in enumerate(reqs)]


def _heartbeat(job_ids: set[str]) -> None:
    """The jobs of a batch that is still working (preparing documents, waiting for the embedder)."""
    if job_ids:
        with db.connection() as conn:
            for job_id in job_ids:
                jobs.heartbeat(conn, job_id)


def _record(req: IngestRequest, result: IngestResult) -> None:
    """One document's final result: metrics, the ingest log line, the job's progress."""
    DOCUMENTS_PROCESSED.labels(result.status).inc()
    if result.status == "stored":
        CHUNKS_PROCESSED.inc(result.chunks)
    log_ingest(
        tenant=req.tenant,
        doc_id=req.doc_id,
        status=result.status,
        chunks=result.chunks,
        model=get_settings().embed.model_name,
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
                acl_outcome=result.acl_outcome,
            )


def _send_fill() -> None:
    """One more vector-fill task on the ingest queue: every sender (the first stored row without a
    vector, a fill's successor, a runner asking for a sibling) sends the same task."""
    app.send_task(TASK_INGEST_FILL_VECTORS, args=[{}])


def _fill_once() -> Callable[[IngestResult], None]:
    """Sends the fill task once, for the first result that stored rows without vectors: as soon as
    they wait, and even when the rest of the batch then fails and is retried (its retry finds these
    documents unchanged and would send nothing)."""
    sent: list[bool] = []

    def fill(result: IngestResult) -> None:
        if result.awaiting_vectors and not sent:
            sent.append(True)
            _send_fill()

    return fill


def _warn_visible_to_no_group(reqs: list[IngestRequest], results: list[IngestResult]) -> None:
    """Log documents just stored with an empty ACL, whatever sent them (events and direct payloads
    included): no query returns them. A permission sync may have given them groups: the stored ACL decides."""
    empty = [r for r, res in zip(reqs, results, strict=True) if res.status == "stored" and not r.acl]
    if not empty:
        return
    with db.connection() as conn:
        for r in empty:
            row = conn.execute(
                "SELECT cardinality(acl) = 0 AS empty FROM documents WHERE tenant = %s AND doc_id = %s",
                (r.tenant, r.doc_id),
            ).fetchone()
            if row and row["empty"]:
                log.warning(
                    "document %r of tenant %r stored with an empty ACL: visible to no group until"
                    " `ragline acl set`",
                    r.doc_id,
                    r.tenant,
                )


@app.task(name=TASK_INGEST_DOCUMENT, base=IngestTask, bind=True, payload_model=IngestRequest)
def ingest_document_task(self: IngestTask, req: IngestRequest) -> dict:
    return _run(self, [req])[0].model_dump()


@app.task(name=TASK_INGEST_BATCH, base=IngestTask, bind=True, payload_model=IngestBatchRequest)
def ingest_batch_task(self: IngestTask, batch: IngestBatchRequest) -> dict:
    return {"documents": [r.model_dump() for r in _run(self, batch.documents)]}


@app.task(name=TASK_INGEST_REEMBED, autoretry_for=())
def reembed_task(payload: dict | None = None) -> dict:
    """Re-embed chunks whose embed_model differs from the configured model (one runner at a time)."""
    payload = payload or {}
    return run_reembed(job_id=payload.get("job_id"), tenant=payload.get("tenant"))


@app.task(name=TASK_INGEST_FILL_VECTORS, base=IngestTask)
def fill_vectors_task(payload: dict | None = None) -> dict:
    """Embed rows stored before their vectors (a few batches), then send itself again while any remain;
    a fill stopped by the soft time limit (one batch slower than the whole budget) sends its successor
    too, so the rows it did not write are not left until the hourly reindex."""
    try:
        out = run_fill(ask_for_runner=_send_fill)
    except SoftTimeLimitExceeded:
        _send_fill()
        raise
    if out["more"]:  # the rest after the ingest batches queued meanwhile
        _send_fill()
    return out


_WARMUP_SAMPLES = {  # one tiny document per parser that imports something heavy
    "md": "# Прогрев\n\nПервый абзац. Второе предложение.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
    "html": "<html><body><h1>Прогрев</h1><p>Первый абзац. Второе предложение.</p></body></html>",
    "text": "Прогрев\n\nПервый абзац. Второе предложение.\n",
}


@warmup.register("ingest", "ingest")
def _warm_ingest() -> None:
    """Parsers, the sentence splitter and the embedder, loaded before the first document."""
    s = get_settings()
    for fmt, text in _WARMUP_SAMPLES.items():
        parsed = parse_bytes(text.encode(), fmt, default_title="warmup")
        chunk_blocks(parsed.blocks, s.chunk.max_chars, hard_max_chars=s.chunk.hard_max_chars)
    warmup.warm_embedder()
