"""A bare Celery round trip, to judge the query queue against: ragline's Celery app (same broker,
result backend, serializer, acks, prefetch and kombu client reuse) with one extra task that does
nothing, consumed by its own worker process of the query pool's kind on a queue of its own.

The task is registered only when this module is imported, which only a benchmark does (the
worker it starts runs ``-A bench.noop_worker:app``): no ragline worker or producer knows it, so it
is never exposed in production. It is a plain Celery task, outside ragline's admission check
(which refuses every task ragline does not define) and payload validation: those are part of
what ragline adds, so they belong on the measured side, not in the baseline. The difference ``queue p95 − direct p95`` of a retrieval is
then judged against this worker's p95, on the same machine in the same run, instead of against
a fixed allowance that a slow VM's Celery alone exceeds.

    python -m celery -A bench.noop_worker:app worker --pool solo -Q bench-noop
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from celery import Task

from ragline.shared.worker.celery_app import app

TASK = "bench.noop"
QUEUE = "bench-noop"


# Celery's own Task, not ragline's base: the admission check (which refuses any task ragline does
# not know) and the payload validation are ragline's overhead, part of what is being judged
@app.task(name=TASK, base=Task)
def noop(payload: dict | None = None) -> dict:
    """Nothing: what is left of a round trip is Celery, Redis and the worker's pool."""
    return {}


def round_trip_ms() -> float:
    """Client-side milliseconds of one no-op task, sent and its result read like a retrieval."""
    t = time.perf_counter()
    app.send_task(TASK, args=[{}], queue=QUEUE).get(timeout=120)
    return (time.perf_counter() - t) * 1000


def worker_argv(settings, pool: str = "query") -> tuple[list[str], dict[str, str]]:
    """The command line of ``pool``'s first worker process (``shared/stack/processes.py``: kind,
    concurrency, events, gossip and mingle off, its environment) with this app and queue instead."""
    from ragline.shared.sdk.names import CELERY_APP
    from ragline.shared.stack.processes import worker_command

    spec = worker_command(settings, pool)
    argv = list(spec.argv)
    argv[argv.index(CELERY_APP)] = f"{__name__}:app"
    argv[argv.index("-Q") + 1] = QUEUE
    argv[argv.index("-n") + 1] = "bench-noop@%h"
    return argv, spec.env


@contextmanager
def bare_worker(timeout: float = 120.0) -> Iterator[None]:
    """The no-op worker while the block runs: a process of its own running the query pool's current
    command line (kind, concurrency, environment), under the smoke tests too (a second in-process
    worker beside the session's would share Celery's worker state with it)."""
    from ragline.shared.config.settings import get_settings
    from ragline.shared.stack.processes import child_env

    settings = get_settings()
    argv, env = worker_argv(settings)
    log = settings.home_dir / "logs" / "bench-noop.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # its own metrics files, beside (not among) the query pool's
    env["PROMETHEUS_MULTIPROC_DIR"] = str(settings.home_dir / "run" / "bench-noop-metrics")
    Path(env["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**child_env(settings), **env},
            start_new_session=True,
        )
    try:
        try:
            app.send_task(TASK, args=[{}], queue=QUEUE).get(timeout=timeout)  # up once it answers
        except Exception as exc:
            text = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"the no-op worker did not answer (exit code {proc.poll()}):\n{text}") from exc
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
