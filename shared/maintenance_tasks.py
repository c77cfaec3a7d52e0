"""Beat-driven maintenance tasks (the control pool)."""

from __future__ import annotations

import logging

from shared.celery_app import app

log = logging.getLogger(__name__)


@app.task(name="ragline.maintenance.reindex")
def reindex_task() -> dict:
    """Scheduled full reindex over the configured sources (sources arrive with the lifecycle work)."""
    log.info("scheduled reindex tick: no sources configured")
    return {"sources": 0}
