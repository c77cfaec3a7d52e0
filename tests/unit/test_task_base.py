"""The base task every ragline task derives from: validation into the contract model, retries that
re-send the JSON payload, contained errors for the query pool."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ConfigDict

from ragline.shared.worker.celery_app import app


class Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tenant: str
    n: int = 0


calls: list[tuple[object, object]] = []


@app.task(name="tests.base.validated", bind=True, payload_model=Payload, retry_backoff=False)
def validated(self, req: Payload) -> dict:
    calls.append((req, self.request.args[0]))
    if len(calls) == 1:
        raise ConnectionError("broker went away")
    return {"tenant": req.tenant, "n": req.n}


@app.task(name="tests.base.contained", payload_model=Payload, contain_errors=True, autoretry_for=())
def contained(req: Payload) -> dict:
    raise RuntimeError(f"secret detail of {req.tenant}")


def test_a_bad_payload_returns_the_error_result_and_is_not_retried():
    calls.clear()
    out = validated.apply(args=[{"tenant": "acme", "unexpected": 1}]).get()
    assert out["ok"] is False and out["error"] == "invalid payload"
    assert out["detail"][0]["loc"] == ["unexpected"]
    assert calls == []


def test_an_infrastructure_error_retries_with_the_json_payload():
    calls.clear()
    out = validated.apply(args=[{"tenant": "acme", "n": 3}]).get()
    assert out == {"tenant": "acme", "n": 3}
    assert len(calls) == 2  # the first run failed, the retry succeeded
    for req, raw in calls:
        assert isinstance(req, Payload)
        assert raw == {"tenant": "acme", "n": 3}  # what a retry re-sends: still JSON
        json.dumps(raw)


def test_every_ragline_task_uses_the_base_and_its_retry_policy():
    import ragline.ingest.control.tasks  # noqa: F401  (registers the tasks)
    import ragline.ingest.tasks  # noqa: F401
    import ragline.query.tasks  # noqa: F401
    from ragline.shared.sdk import names
    from ragline.shared.worker.task_base import RaglineTask

    registered = {n: t for n, t in app.tasks.items() if n.startswith("ragline.")}
    assert {v for k, v in vars(names).items() if k.startswith("TASK_") and isinstance(v, str)} == set(
        registered
    )
    assert all(isinstance(t, RaglineTask) for t in registered.values())
    acl = registered[names.TASK_ACL_SYNC]
    assert ConnectionError in acl.autoretry_for and acl.retry_backoff and acl.retry_jitter and acl.acks_late
    ingest = registered[names.TASK_INGEST_BATCH]
    assert any(e.__name__ == "ProviderError" for e in ingest.autoretry_for)
    ask = registered[names.TASK_QUERY_ASK]
    assert ask.autoretry_for == () and ask.contain_errors and not ask.acks_late


def test_contained_errors_become_an_internal_error_result_without_the_message():
    out = contained.apply(args=[{"tenant": "acme"}]).get()
    assert out == {"ok": False, "error": "internal error", "detail": "RuntimeError"}


def test_no_payload_at_all_fails_as_a_task():
    with pytest.raises(TypeError):
        validated.apply(args=[]).get()
