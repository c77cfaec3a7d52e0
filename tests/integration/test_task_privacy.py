"""Task messages, events and worker logs carry no question text and no document content.

Celery would put ``saferepr(args)`` into every message's headers (and from there into task events
and Flower) and log the first KB of every result; ragline sends a redacted summary instead and
keeps result content out of the worker log.
"""

from __future__ import annotations

from celery import signals

from ragline.ingest.pipeline import ingest_document
from ragline.shared.sdk.celery_base import payload_summary
from ragline.shared.sdk.contracts import IngestRequest
from ragline.shared.sdk.names import TASK_QUERY_ASK, TASK_QUERY_RETRIEVE
from tests.pools import start_pool, wait_ready

SECRET_TEXT = "Пароль от сейфа хранится у бухгалтера Зинаиды Кузьминичны"
QUESTION = "У кого хранится пароль от сейфа?"


def test_payload_summary_keeps_ids_and_drops_text():
    s = payload_summary(
        [
            {
                "tenant": "acme",
                "query": QUESTION,
                "groups": ["hr"],
                "k": 5,
                "mode": "hybrid",
                "query_vector": [0.1] * 384,
            }
        ]
    )
    assert "acme" in s and "'k': 5" in s and "hybrid" in s and f"'query_chars': {len(QUESTION)}" in s
    assert "сейф" not in s and "hr" not in s and "0.1" not in s
    docs = payload_summary([{"documents": [{"tenant": "acme", "content": SECRET_TEXT}] * 3}])
    assert docs == "{'n_documents': 3}"
    assert payload_summary(["a", "b"]) == "<list of 2>"


def test_messages_events_and_logs_hold_no_question_or_content(stack, tenant):
    from ragline.shared.worker.celery_app import app

    stored = ingest_document(
        IngestRequest(
            tenant=tenant,
            doc_id="safe.md",
            fmt="md",
            acl=["hr"],
            version=1,
            content=f"# Сейф\n\n{SECRET_TEXT}. Ключ от сейфа лежит в столе.\n",
        )
    )
    assert stored.status == "stored"
    published: list[dict] = []

    def capture(headers=None, **_):
        published.append(dict(headers or {}))

    signals.before_task_publish.connect(capture, weak=False)
    pool = start_pool(stack, "query", concurrency=1)
    try:
        wait_ready(app, pool)
        hits = app.send_task(
            TASK_QUERY_RETRIEVE,
            args=[{"query": QUESTION, "tenant": tenant, "groups": ["hr"], "mode": "lexical"}],
            queue=pool.queue,
        ).get(timeout=60)
        assert hits["hits"] and "Зинаиды" in hits["hits"][0]["content"]  # the caller gets the content
        answer = app.send_task(
            TASK_QUERY_ASK,
            args=[{"query": QUESTION, "tenant": tenant, "groups": ["hr"], "mode": "lexical"}],
            queue=pool.queue,
        ).get(timeout=120)
        assert "Зинаиды" in answer["answer"]
    finally:
        signals.before_task_publish.disconnect(capture)
        pool.stop()
    ours = [h for h in published if h.get("task") in (TASK_QUERY_RETRIEVE, TASK_QUERY_ASK)]
    assert len(ours) == 2
    for h in ours:
        assert tenant in h["argsrepr"] and "сейф" not in h["argsrepr"].lower()
    log = pool.log_text()
    assert "worker process warmed" in log or "ready" in log.lower()  # the log is the pool's, and written
    assert "Зинаиды" not in log and "сейф" not in log.lower()
