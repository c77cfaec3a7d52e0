"""Thin Celery tasks of the query pool.

A malformed payload gets an ``ErrorResult`` (``{"ok": false, "error": "invalid payload", ...}``);
an unexpected failure gets ``{"ok": false, "error": "internal error"}`` (the base task's
``contain_errors``): never a dead worker, never a traceback or a secret in the result. Questions
are not retried: the chat backend is waiting and decides itself.

Every question first passes its tenant's admission (:mod:`ragline.query.admission`) and then runs
within its deadline (:func:`ragline.query.deadline.question_deadline`); a question refused or
stopped by a query-path limit is answered with its typed error (``rate limited``, ``deadline
exceeded``, ``retrieval timeout``), which the client raises as ``RaglineError``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from celery import signals, states
from celery.utils.functional import maybe_list
from celery.worker.control import control_command, revoke
from pydantic import BaseModel

from ragline.query import service
from ragline.query.admission import get_admission
from ragline.query.answer.stream import answer_publisher, publishing
from ragline.query.deadline import QueryLimitError, question_deadline
from ragline.query.retrieval.catalog import indexed_sources
from ragline.query.retrieval.row_security import row_security_problem
from ragline.query.retrieval.vector_index import problem as vector_index_problem
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import AskRequest, ErrorResult, RerankRequest, SearchRequest, SourcesRequest
from ragline.shared.sdk.names import (
    CONTROL_CANCEL_QUESTION,
    TASK_QUERY_ASK,
    TASK_QUERY_RERANK,
    TASK_QUERY_RETRIEVE,
    TASK_QUERY_SOURCES,
)
from ragline.shared.worker import db, warmup
from ragline.shared.worker.celery_app import app
from ragline.shared.worker.metrics import QUERY_ERRORS
from ragline.shared.worker.providers import get_reranker

log = logging.getLogger(__name__)

#: Celery puts a repr of every result into the task-succeeded event (Flower) and computes it on
#: every call: for hits and answers that repr is tenant content, so only its first key is shown
RESULT_REPR = 8

QUERY_TASK = {
    "acks_late": False,
    "track_started": False,
    "resultrepr_maxsize": RESULT_REPR,
    "autoretry_for": (),
    "contain_errors": True,
}


#: the tasks whose caller waits for the reply: nobody reads the reply of one revoked or expired
QUESTION_TASKS = frozenset({TASK_QUERY_RETRIEVE, TASK_QUERY_RERANK, TASK_QUERY_ASK, TASK_QUERY_SOURCES})


@signals.task_revoked.connect
def _forget_abandoned_question(sender=None, request=None, **_: object) -> None:
    """A question skipped because its caller revoked it (the user went away) or because it expired
    (its caller's wait had ended before a worker got to it) leaves no result behind. Celery stores a
    REVOKED state for it, published first, so a caller still subscribed learns of it; nobody reads
    the stored copy, which would otherwise stay in Redis until the result expiry, one per abandoned
    question of a backlog."""
    if sender is not None and getattr(sender, "name", None) in QUESTION_TASKS and request is not None:
        sender.backend.forget(request.id)


@control_command(name=CONTROL_CANCEL_QUESTION, variadic="task_id", signature="[id1 [id2 [... [idN]]]]")
def cancel_question(state, task_id, **kwargs):  # type: ignore[no-untyped-def]
    """The async client's cancellation of a question, a remote control command of its own (Celery's
    documented way to add one): Celery's ``revoke`` (a question still to come is skipped, through
    the worker's revoked set), then the REVOKED state forgotten. Celery's ``revoke`` stores that
    state for a task that is not active on the worker and has no result yet, without the
    ``task_revoked`` signal: a cancelled question races its own answer there (the worker answers,
    the client deletes the reply, then the broadcast arrives, reads the deleted key as PENDING and
    stores a REVOKED nobody reads, until the result expiry). A skip the worker announces itself is
    forgotten by :func:`_forget_abandoned_question`."""
    out = revoke(state, task_id, **kwargs)
    backend = state.app.backend
    for i in maybe_list(task_id) or []:
        if backend.get_state(i) == states.REVOKED:
            backend.forget(i)
    return out


def run_question(tenant: str, question: Callable[[], BaseModel]) -> dict:
    """``question()`` behind the tenant's admission and within the question's deadline, as the
    task's result: every query task (search, rerank, ask, sources) is a tenant's question."""
    settings = get_settings()
    try:
        with get_admission().admit(tenant), question_deadline(settings.deadlines.question_s):
            return question().model_dump()
    except QueryLimitError as exc:
        QUERY_ERRORS.labels(error=exc.error).inc()
        return ErrorResult(error=exc.error, detail=exc.detail).model_dump()
    except Exception:  # answered "internal error" by the base task (contain_errors)
        QUERY_ERRORS.labels(error="internal error").inc()
        raise


@app.task(name=TASK_QUERY_RETRIEVE, payload_model=SearchRequest, **QUERY_TASK)
def retrieve_task(req: SearchRequest) -> dict:
    return run_question(req.tenant, lambda: service.search(req))


@app.task(name=TASK_QUERY_RERANK, payload_model=RerankRequest, **QUERY_TASK)
def rerank_task(req: RerankRequest) -> dict:
    return run_question(req.tenant, lambda: service.rerank(req))


@app.task(name=TASK_QUERY_SOURCES, payload_model=SourcesRequest, **QUERY_TASK)
def sources_task(req: SourcesRequest) -> dict:
    """What is indexed for the caller (``ragline mcp``'s ``sources``), behind the same admission."""
    return run_question(req.tenant, lambda: indexed_sources(req))


@app.task(name=TASK_QUERY_ASK, payload_model=AskRequest, **QUERY_TASK)
def ask_task(req: AskRequest) -> dict:
    task_id = ask_task.request.id
    if not req.stream or not task_id:
        return run_question(req.tenant, lambda: service.ask(req))
    # streamed: the answer's deltas go out as generated, then the result itself, so a reader of
    # the stream always gets a terminal entry, refusals and failures included
    publisher = answer_publisher(task_id)
    try:
        with publishing(publisher):
            result = run_question(req.tenant, lambda: service.ask(req))
    except Exception:
        publisher.end(ErrorResult(error="internal error").model_dump())
        raise
    publisher.end(result)
    return result


@warmup.register("query", "query")
def _warm_query() -> None:
    """The query embedder, the reranker, the tenant admission and the read-only role's connection
    pool, before the first question."""
    warmup.warm_embedder()
    get_reranker()
    get_admission()
    with db.query_connection() as conn:
        problem = row_security_problem(conn)
        settings = get_settings()
        index_problem = vector_index_problem(conn, settings.vector.index, settings.embed.dim)
    if problem:
        log.warning(problem)
    if index_problem:
        # the searches still answer, reading whole tenants: loud, not fatal (a rebuild is under way)
        log.error(index_problem)
