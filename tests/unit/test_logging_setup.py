"""Structured logs: JSON lines, question hashed never logged, secrets scrubbed."""

from __future__ import annotations

import io
import json
import logging

import pytest

from ragline.shared.worker import logging_setup


@pytest.fixture()
def captured(monkeypatch):
    from ragline.shared.config.settings import reset_settings

    monkeypatch.setenv("RAGLINE_PROVIDERS_VOYAGE_API_KEY", "pa-SECRET-voyage-0123456789")
    monkeypatch.setenv("RAGLINE_FLOWER_PASSWORD", "flower-pw-42")
    reset_settings()
    buf = io.StringIO()
    logging_setup.configure(level="INFO", json_output=True, stream=buf)
    yield buf
    root = logging.getLogger()
    for h in [h for h in root.handlers if h.get_name() == "ragline-json"]:
        root.removeHandler(h)
    monkeypatch.undo()
    reset_settings()


def _lines(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def test_query_event_has_hash_latency_chunks_model_tenant_but_no_text(captured):
    question = "Как настроить очередь ingest для арендатора acme?"
    logging_setup.log_query(
        "ask", tenant="acme", question=question, latency_ms=12.3456, chunks=4, model="voyage-4"
    )
    (line,) = _lines(captured)
    assert line["event"] == "ask" and line["tenant"] == "acme" and line["chunks"] == 4
    assert line["model"] == "voyage-4" and line["latency_ms"] == 12.35 and line["level"] == "info"
    assert line["question_hash"] == logging_setup.question_hash(question)
    assert "очередь" not in captured.getvalue() and "question" not in line


def test_question_field_passed_by_mistake_is_replaced_by_hash(captured):
    logging_setup.get_logger("x").info("oops", query="секретный вопрос")
    (line,) = _lines(captured)
    assert "query" not in line and line["question_hash"] == logging_setup.question_hash("секретный вопрос")
    assert "секретный" not in captured.getvalue()


def test_question_hash_is_stable_under_whitespace_and_case():
    assert logging_setup.question_hash("  Hello   World ") == logging_setup.question_hash("hello world")
    assert logging_setup.question_hash("a") != logging_setup.question_hash("b")


def test_secrets_never_reach_the_output(captured):
    log = logging_setup.get_logger("t")
    log.info("provider call", api_key="pa-SECRET-voyage-0123456789", detail="key=pa-SECRET-voyage-0123456789")
    logging.getLogger("celery.worker").warning("broker redis://user:hunter2@127.0.0.1:6379/0 pw flower-pw-42")
    from ragline.shared.config.settings import get_settings

    log.info("settings", voyage=get_settings().providers.voyage_api_key)
    out = captured.getvalue()
    for secret in ("pa-SECRET-voyage-0123456789", "hunter2", "flower-pw-42"):
        assert secret not in out
    lines = _lines(captured)
    assert lines[0]["api_key"] == "***" and lines[0]["detail"] == "key=***"
    assert "redis://user:***@127.0.0.1" in lines[1]["event"] and lines[1]["logger"] == "celery.worker"
    assert lines[2]["voyage"] == "***"


def test_celery_per_task_info_lines_are_quiet_but_warnings_pass(captured):
    """Celery's per-task INFO lines (received; succeeded with the result's repr) stay out of the log:
    ragline logs each task itself without content. Their warnings and errors still come through."""
    logging.getLogger("celery.worker.strategy").info("Task ragline.query.retrieve[abc] received")
    logging.getLogger("celery.app.trace").info(
        "Task ragline.query.ask[abc] succeeded in 0.01s: {'answer': 'x'}"
    )
    logging.getLogger("celery.app.trace").warning("Task ragline.ingest.batch[abc] retry: OperationalError")
    events = [line["event"] for line in _lines(captured)]
    assert events == ["Task ragline.ingest.batch[abc] retry: OperationalError"]


def test_a_value_logged_clean_is_masked_once_it_becomes_a_known_secret(monkeypatch):
    """The masking remembers the strings it found clean; a secret configured later is still masked
    in a string logged clean before, and a string that held a secret is masked every time."""
    from ragline.shared.config.settings import reset_settings

    buf = io.StringIO()
    try:
        reset_settings()
        logging_setup.configure(level="INFO", json_output=True, stream=buf)
        for _ in range(3):
            logging_setup.get_logger("t").info("rotated", tenant="tenant-of-rotated-pw-77")
            logging_setup.get_logger("t").info("url", target="redis://u:hunter2@127.0.0.1:6379/0")
        monkeypatch.setenv("RAGLINE_FLOWER_PASSWORD", "rotated-pw-77")
        reset_settings()
        logging_setup.configure(level="INFO", json_output=True, stream=buf)
        logging_setup.get_logger("t").info("rotated", tenant="tenant-of-rotated-pw-77")
    finally:
        root = logging.getLogger()
        for h in [h for h in root.handlers if h.get_name() == "ragline-json"]:
            root.removeHandler(h)
        monkeypatch.undo()
        reset_settings()
    lines = _lines(buf)
    assert [line["tenant"] for line in lines if line["event"] == "rotated"] == [
        "tenant-of-rotated-pw-77"
    ] * 3 + ["tenant-of-***"]
    assert [line["target"] for line in lines if line["event"] == "url"] == [
        "redis://u:***@127.0.0.1:6379/0"
    ] * 3
