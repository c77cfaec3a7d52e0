"""One structured log line per finished task with the resources it used: peak RSS of the worker
process (``ru_maxrss``; with ``--max-tasks-per-child 1`` that is the task's own peak) and CPU time.
Operations reads it to size memory limits; the chaos suite reads it to bound memory per bad input."""

from __future__ import annotations

import resource
import time

from celery import signals

from ragline.shared.worker.logging_setup import get_logger

_started: dict[str, tuple[float, float]] = {}


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@signals.task_prerun.connect
def _prerun(task_id: str | None = None, **_: object) -> None:
    if task_id:
        _started[task_id] = (time.perf_counter(), _cpu())


@signals.task_postrun.connect
def _postrun(task_id: str | None = None, task=None, state: str | None = None, **_: object) -> None:
    t0, c0 = _started.pop(task_id or "", (None, None))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    get_logger("ragline.task").info(
        "task_resources",
        task_id=task_id,
        task=getattr(task, "name", None),
        state=state,
        peak_rss_mb=round(peak_mb, 1),
        wall_ms=round((time.perf_counter() - t0) * 1000, 1) if t0 is not None else None,
        cpu_s=round(_cpu() - c0, 3) if c0 is not None else None,
    )
