"""Thin Celery tasks of the query pool.

A malformed payload gets an ``ErrorResult`` (``{"ok": false, "error": "invalid payload", ...}``);
an unexpected failure gets ``{"ok": false, "error": "internal error"}``: never a dead worker,
never a traceback or a secret in the result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pydantic import BaseModel, ValidationError

from ragline.query import service
from ragline.shared.celery_app import app
from ragline.shared.contracts import (
    TASK_QUERY_ASK,
    TASK_QUERY_RERANK,
    TASK_QUERY_RETRIEVE,
    AskRequest,
    ErrorResult,
    RerankRequest,
    SearchRequest,
)

log = logging.getLogger(__name__)

#: Celery puts a repr of every result into the task-succeeded event (Flower) and computes it on
#: every call: for hits and answers that repr is tenant content, so only its first key is shown
RESULT_REPR = 8


def _run(model: type[BaseModel], payload: object, fn: Callable) -> dict:
    try:
        req = model.model_validate(payload)
    except ValidationError as exc:
        return ErrorResult.invalid_payload(exc)
    try:
        return fn(req).model_dump()
    except Exception as exc:
        log.exception("%s failed", fn.__name__)
        return ErrorResult(error="internal error", detail=type(exc).__name__).model_dump()


@app.task(name=TASK_QUERY_RETRIEVE, acks_late=False, track_started=False, resultrepr_maxsize=RESULT_REPR)
def retrieve_task(payload: dict) -> dict:
    return _run(SearchRequest, payload, service.search)


@app.task(name=TASK_QUERY_RERANK, acks_late=False, track_started=False, resultrepr_maxsize=RESULT_REPR)
def rerank_task(payload: dict) -> dict:
    return _run(RerankRequest, payload, service.rerank)


@app.task(name=TASK_QUERY_ASK, acks_late=False, track_started=False, resultrepr_maxsize=RESULT_REPR)
def ask_task(payload: dict) -> dict:
    return _run(AskRequest, payload, service.ask)
