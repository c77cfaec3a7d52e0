"""Thin Celery tasks of the query pool.

A malformed payload gets an ``ErrorResult`` (``{"ok": false, "error": "invalid payload", ...}``);
an unexpected failure gets ``{"ok": false, "error": "internal error"}`` (the base task's
``contain_errors``): never a dead worker, never a traceback or a secret in the result. Questions
are not retried: the chat backend is waiting and decides itself.
"""

from __future__ import annotations

from ragline.query import service
from ragline.shared import warmup
from ragline.shared.celery_app import app
from ragline.shared.contracts import AskRequest, RerankRequest, SearchRequest
from ragline.shared.names import TASK_QUERY_ASK, TASK_QUERY_RERANK, TASK_QUERY_RETRIEVE
from ragline.shared.providers import get_reranker

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


@app.task(name=TASK_QUERY_RETRIEVE, payload_model=SearchRequest, **QUERY_TASK)
def retrieve_task(req: SearchRequest) -> dict:
    return service.search(req).model_dump()


@app.task(name=TASK_QUERY_RERANK, payload_model=RerankRequest, **QUERY_TASK)
def rerank_task(req: RerankRequest) -> dict:
    return service.rerank(req).model_dump()


@app.task(name=TASK_QUERY_ASK, payload_model=AskRequest, **QUERY_TASK)
def ask_task(req: AskRequest) -> dict:
    return service.ask(req).model_dump()


@warmup.register("query", "query")
def _warm_query() -> None:
    """The query embedder and the reranker, loaded before the first question."""
    warmup.warm_embedder()
    get_reranker()
