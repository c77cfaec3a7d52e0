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
TASK_QUERY_SOURCES = "ragline.query.sources"
#: the query workers' remote control command that cancels a question (``ragline.query.tasks``,
#: ``cancel_question``): Celery's revoke, then its REVOKED state forgotten
CONTROL_CANCEL_QUESTION = "ragline_cancel_question"
TASK_ACL_SYNC = "ragline.acl.sync"
TASK_REINDEX = "ragline.maintenance.reindex"
TASK_STUCK_JOBS = "ragline.maintenance.stuck_jobs"
TASK_PURGE = "ragline.maintenance.purge"

QUEUES = ("ingest", "query", "acl", "maintenance")

#: which queues each worker pool consumes (``ragline worker POOL`` starts one)
POOLS: dict[str, tuple[str, ...]] = {
    "ingest": ("ingest",),
    "query": ("query",),
    "control": ("acl", "maintenance"),
}

#: the modules that define the tasks, imported by workers (Celery ``include``), never by producers,
#: and the pool whose queues each module's tasks are routed to
TASK_MODULE_POOLS: dict[str, str] = {
    "ragline.ingest.tasks": "ingest",
    "ragline.ingest.control.tasks": "control",
    "ragline.query.tasks": "query",
}
TASK_MODULES = tuple(TASK_MODULE_POOLS)

#: the route table: every task a ragline worker runs and its queue, one of the queues of the pool
#: whose module defines the task (:data:`TASK_MODULE_POOLS`; a unit test checks both against the
#: registered tasks). A task's name is wire contract and never moves with its module: document
#: events keep ``ragline.ingest.event`` and, like every control package task, go to the control
#: pool, so a delete or a permission change never waits behind ingestion.
TASK_QUEUES: dict[str, str] = {
    TASK_INGEST_DOCUMENT: "ingest",
    TASK_INGEST_BATCH: "ingest",
    TASK_INGEST_REEMBED: "ingest",
    TASK_INGEST_FILL_VECTORS: "ingest",
    TASK_INGEST_EVENT: "acl",
    TASK_QUERY_RETRIEVE: "query",
    TASK_QUERY_RERANK: "query",
    TASK_QUERY_ASK: "query",
    TASK_QUERY_SOURCES: "query",
    TASK_ACL_SYNC: "acl",
    TASK_REINDEX: "maintenance",
    TASK_STUCK_JOBS: "maintenance",
    TASK_PURGE: "maintenance",
}

#: every task a ragline worker runs; Celery's built-in tasks (``celery.group``, ``celery.chain``...) are
#: not among them, so no producer role may send those when signing is on
ALL_TASKS = tuple(TASK_QUEUES)

#: the table as Celery's ``task_routes`` (the workers' app and the producer clients')
TASK_ROUTES: dict[str, dict[str, str]] = {
    task: {"queue": queue, "routing_key": queue} for task, queue in TASK_QUEUES.items()
}

#: with message signing on, the tasks each producer role may send (shared/sdk/signing.py). A role is
#: named by the subject CN of the certificate that signs, ``ragline-<role>``: a chat backend asks
#: questions, an event relay forwards document events and permission changes, an operator (the
#: ``ragline`` command) and the workers and beat (retries, fan-out, schedules) send everything.
ROLE_PREFIX = "ragline-"
PRODUCER_ROLES: dict[str, frozenset[str]] = {
    "chat": frozenset({TASK_QUERY_RETRIEVE, TASK_QUERY_RERANK, TASK_QUERY_ASK, TASK_QUERY_SOURCES}),
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

#: the Celery app, as ``celery -A`` takes it
CELERY_APP = "ragline.shared.worker.celery_app:app"

#: a streamed answer (``AskRequest.stream``) is published into one Redis stream per question,
#: named after the ask task's id, which the producer knows as soon as it sends the task
ANSWER_STREAM_PREFIX = "ragline-answer:"


def answer_stream_key(task_id: str) -> str:
    """The Redis stream the query worker publishes the answer of ask task ``task_id`` into."""
    return ANSWER_STREAM_PREFIX + task_id
