"""Beat-driven maintenance tasks (the control pool): the scheduled full reindex and stuck-job detection.

Beat sends each tick with an ``expires`` (``shared/celery_app.py``), so ticks that nobody picked
up in time are dropped instead of piling up; a reindex still running when the next tick arrives
makes that tick a no-op (advisory lock in ``ingest/reindex.py``).
"""

from __future__ import annotations

import logging

from shared import db, jobs
from shared.celery_app import app
from shared.contracts import TASK_INGEST_REEMBED, TASK_REINDEX, TASK_STUCK_JOBS
from shared.settings import get_settings

log = logging.getLogger(__name__)


def _send(name: str, payload: dict) -> str:
    return app.send_task(name, args=[payload]).id


def run_reindex(source_names: list[str] | None = None, kind: str = "reindex", reembed: bool = False) -> dict:
    """List every configured source (or the named ones), enqueue new/changed, prune vanished; with
    ``reembed`` also start a background re-embedding when chunks carry another model than the configured one."""
    from ingest.reembed import pending_chunks
    from ingest.reindex import TOTALS, reindex, select_sources

    settings = get_settings()
    specs = select_sources(settings.sources, source_names)
    with db.connection() as conn:
        out = reindex(conn, specs, _send, http_timeout=settings.http_source_timeout_s, kind=kind) if specs \
            else {"job_id": None, "state": "succeeded", "sources": {}, **dict.fromkeys(TOTALS, 0)}
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
    return run_reindex(payload.get("sources"), kind=payload.get("kind", "reindex"),
                       reembed=bool(payload.get("reembed", False)))


@app.task(name=TASK_STUCK_JOBS, acks_late=True)
def stuck_jobs_task(payload: dict | None = None) -> dict:
    """Mark running jobs without a recent heartbeat as failed ('stuck: ...')."""
    older = float((payload or {}).get("older_than_s") or get_settings().job_stuck_after_s)
    with db.connection() as conn:
        marked = jobs.mark_stuck(conn, older)
    for j in marked:
        log.warning("job %s (%s) marked stuck: %s", j["id"], j["kind"], j["error"])
    return {"marked": marked}
