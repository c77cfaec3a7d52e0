"""Thin Celery tasks of the query pool. A malformed payload gets an ErrorResult, never a dead worker."""

from __future__ import annotations

from pydantic import ValidationError

from query import service
from shared.celery_app import app
from shared.contracts import TASK_QUERY_ASK, TASK_QUERY_RETRIEVE, AskRequest, ErrorResult, SearchRequest


def _invalid(exc: ValidationError) -> dict:
    return ErrorResult(error="invalid payload", detail=exc.errors(include_url=False, include_input=False)).model_dump()


@app.task(name=TASK_QUERY_RETRIEVE, acks_late=False)
def retrieve_task(payload: dict) -> dict:
    try:
        req = SearchRequest.model_validate(payload)
    except ValidationError as exc:
        return _invalid(exc)
    return service.search(req).model_dump()


@app.task(name=TASK_QUERY_ASK, acks_late=False)
def ask_task(payload: dict) -> dict:
    try:
        req = AskRequest.model_validate(payload)
    except ValidationError as exc:
        return _invalid(exc)
    return service.ask(req).model_dump()
