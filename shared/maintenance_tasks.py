"""Beat-driven maintenance tasks (the control pool): the scheduled full reindex, stuck-job detection
and retention (old tombstones, finished jobs, resolved errors).

Beat sends each tick with an ``expires`` (``shared/celery_app.py``), so ticks that nobody picked
up in time are dropped instead of piling up; a reindex still running when the next tick arrives
makes that tick a no-op (advisory lock in ``ingest/reindex.py``).
"""

from __future__ import annotations

import logging

from ragline.shared import db, jobs
from ragline.shared.celery_app import app
from ragline.shared.contracts import TASK_INGEST_REEMBED, TASK_PURGE, TASK_REINDEX, TASK_STUCK_JOBS
from ragline.shared.settings import get_settings

log = logging.getLogger(__name__)


def _send(name: str, payload: dict) -> str:
    return app.send_task(name, args=[payload]).id


def run_reindex(source_names: list[str] | None = None, kind: str = "reindex", reembed: bool = False) -> dict:
    """List every configured source (or the named ones), enqueue new/changed, prune vanished; with
    ``reembed`` also start a background re-embedding when chunks carry another model than the configured one."""
    from ragline.ingest.reembed import pending_chunks
    from ragline.ingest.reindex import TOTALS, reindex, select_sources

    settings = get_settings()
    specs = select_sources(settings.sources, source_names)
    with db.connection() as conn:
        out = (
            reindex(conn, specs, _send, http_timeout=settings.http_source_timeout_s, kind=kind)
            if specs
            else {"job_id": None, "state": "succeeded", "sources": {}, **dict.fromkeys(TOTALS, 0)}
        )
        stale = pending_chunks(conn, settings.embed_model_name) if reembed else 0
    if stale:
        out["reembed_task"] = _send(TASK_INGEST_REEMBED, {})
        out["reembed_pending"] = stale
    log.info("reindex: %s", {k: v for k, v in out.items() if k != "sources"})
    return out


@app.task(name=TASK_REINDEX, acks_late=True)
def reindex_task(payload: dict | None = None) -> dict:
    """Scheduled (beat, no payload: also checks for a model change) or on-demand (``ragline reindex``)."""
    if payload is None:
        return run_reindex(reembed=True)
    return run_reindex(
        payload.get("sources"),
        kind=payload.get("kind", "reindex"),
        reembed=bool(payload.get("reembed", False)),
    )


@app.task(name=TASK_STUCK_JOBS, acks_late=True)
def stuck_jobs_task(payload: dict | None = None) -> dict:
    """Mark running jobs without a recent heartbeat as failed ('stuck: ...')."""
    older = float((payload or {}).get("older_than_s") or get_settings().job_stuck_after_s)
    with db.connection() as conn:
        marked = jobs.mark_stuck(conn, older)
    for j in marked:
        log.warning("job %s (%s) marked stuck: %s", j["id"], j["kind"], j["error"])
    return {"marked": marked}


def purge(conn, tombstone_days: float, job_days: float) -> dict[str, int]:
    """Delete what only history needs: tombstones (``status = 'deleted'``, no chunks) not touched for
    ``tombstone_days``, finished jobs (their per-document rows cascade) and resolved errors older
    than ``job_days``. Open errors and running jobs are never purged."""
    with conn.transaction():
        tomb = conn.execute(
            "DELETE FROM documents WHERE status = 'deleted'"
            " AND updated_at < now() - make_interval(secs => %s)",
            (tombstone_days * 86400,),
        ).rowcount
        done = conn.execute(
            "DELETE FROM jobs WHERE state IN ('succeeded', 'completed_with_errors', 'failed',"
            " 'cancelled') AND coalesce(finished_at, created_at) < now() - make_interval(secs => %s)",
            (job_days * 86400,),
        ).rowcount
        errs = conn.execute(
            "DELETE FROM document_errors WHERE resolved AND created_at < now() - make_interval(secs => %s)",
            (job_days * 86400,),
        ).rowcount
    return {"tombstones": tomb, "jobs": done, "resolved_errors": errs}


@app.task(name=TASK_PURGE, acks_late=True)
def purge_task(payload: dict | None = None) -> dict:
    """Retention (beat, daily by default); the payload may override the ages in days."""
    s = get_settings()
    p = payload or {}
    with db.connection() as conn:
        out = purge(
            conn,
            float(p.get("tombstone_days") or s.tombstone_retention_days),
            float(p.get("job_days") or s.job_retention_days),
        )
    log.info("purge: %s", out)
    return out
