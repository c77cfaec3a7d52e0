"""Queue, pool and task names: the wire contract between producers and workers.

Dependency-free on purpose: a producer, the Celery app, the CLI, the deploy checks and the
import contracts all read these names without importing Celery or pydantic. Task names are stable
API: renaming one breaks every producer that sends it.
"""

from __future__ import annotations

TASK_INGEST_DOCUMENT = "ragline.ingest.document"
TASK_INGEST_BATCH = "ragline.ingest.batch"
TASK_INGEST_REEMBED = "ragline.ingest.reembed"
TASK_INGEST_FILL_VECTORS = "ragline.ingest.fill_vectors"
TASK_INGEST_EVENT = "ragline.ingest.event"
TASK_QUERY_RETRIEVE = "ragline.query.retrieve"
TASK_QUERY_RERANK = "ragline.query.rerank"
TASK_QUERY_ASK = "ragline.query.ask"
TASK_ACL_SYNC = "ragline.acl.sync"
TASK_REINDEX = "ragline.maintenance.reindex"
TASK_STUCK_JOBS = "ragline.maintenance.stuck_jobs"
TASK_PURGE = "ragline.maintenance.purge"

#: every task a ragline worker runs; Celery's built-in tasks (``celery.group``, ``celery.chain``...) are
#: not among them, so no producer role may send those when signing is on
ALL_TASKS = (
    TASK_INGEST_DOCUMENT,
    TASK_INGEST_BATCH,
    TASK_INGEST_REEMBED,
    TASK_INGEST_FILL_VECTORS,
    TASK_INGEST_EVENT,
    TASK_QUERY_RETRIEVE,
    TASK_QUERY_RERANK,
    TASK_QUERY_ASK,
    TASK_ACL_SYNC,
    TASK_REINDEX,
    TASK_STUCK_JOBS,
    TASK_PURGE,
)

#: with message signing on, the tasks each producer role may send (shared/sdk/signing.py). A role is
#: named by the subject CN of the certificate that signs, ``ragline-<role>``: a chat backend asks
#: questions, an event relay forwards document events and permission changes, an operator (the
#: ``ragline`` command) and the workers and beat (retries, fan-out, schedules) send everything.
ROLE_PREFIX = "ragline-"
PRODUCER_ROLES: dict[str, frozenset[str]] = {
    "chat": frozenset({TASK_QUERY_RETRIEVE, TASK_QUERY_RERANK, TASK_QUERY_ASK}),
    "relay": frozenset({TASK_INGEST_EVENT, TASK_ACL_SYNC}),
    "operator": frozenset(ALL_TASKS),
    "worker": frozenset(ALL_TASKS),
}

#: the roles whose messages may carry Celery canvas options (``link``, ``link_error``, a chain, a
#: chord, a group: :data:`ragline.shared.sdk.signing.CANVAS_FIELDS`). A worker sends every task those
#: name itself, signed with its own key, after the message's own task ran, so a role that may send
#: only some tasks must send none of them; ragline's chat and relay flows use no canvas. An unsigned
#: message cannot prove who sent it and carries none either.
CANVAS_ROLES: frozenset[str] = frozenset({"operator", "worker"})

QUEUES = ("ingest", "query", "acl", "maintenance")

#: which queues each worker pool consumes (``ragline worker POOL`` starts one)
POOLS: dict[str, tuple[str, ...]] = {
    "ingest": ("ingest",),
    "query": ("query",),
    "control": ("acl", "maintenance"),
}

TASK_ROUTES = {
    # document events (delete, acl, enqueue an upsert) are small: control pool, never behind ingestion
    TASK_INGEST_EVENT: {"queue": "acl", "routing_key": "acl"},
    "ragline.ingest.*": {"queue": "ingest", "routing_key": "ingest"},
    "ragline.query.*": {"queue": "query", "routing_key": "query"},
    "ragline.acl.*": {"queue": "acl", "routing_key": "acl"},
    "ragline.maintenance.*": {"queue": "maintenance", "routing_key": "maintenance"},
}

#: the modules that define the tasks, imported by workers (Celery ``include``), never by producers
TASK_MODULES = ("ragline.ingest.tasks", "ragline.ingest.control.tasks", "ragline.query.tasks")

#: the Celery app, as ``celery -A`` takes it
CELERY_APP = "ragline.shared.worker.celery_app:app"

#: a streamed answer (``AskRequest.stream``) is published into one Redis stream per question,
#: named after the ask task's id, which the producer knows as soon as it sends the task
ANSWER_STREAM_PREFIX = "ragline-answer:"


def answer_stream_key(task_id: str) -> str:
    """The Redis stream the query worker publishes the answer of ask task ``task_id`` into."""
    return ANSWER_STREAM_PREFIX + task_id
