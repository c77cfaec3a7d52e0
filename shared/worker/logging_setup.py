"""Structured JSON logs (structlog) for every ragline process.

One line per event, machine-readable, with the fields operations needs: tenant, latency, chunk
counts, model. A question is logged only as a short hash (``question_hash``), never as text, and
secrets never reach the output: keys that look like credentials are masked, and every string is
masked before rendering by :func:`ragline.shared.worker.credentials.mask_text` (the one masking of config
output, status and logs): the stack's passwords, ``SecretStr`` settings and the password of every
URL or connection string, and any password written in a URL, a query parameter or a libpq
``password=`` keyword.

Standard-library loggers (Celery, kombu, ragline modules using ``logging``) go through the same
processors, so a worker's log file is one JSON object per line.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import sys
from typing import Any, TextIO

import structlog
from pydantic import SecretStr

from ragline.shared.config.settings import get_settings
from ragline.shared.worker import credentials

REDACTED = credentials.MASK
_SECRET_KEY = re.compile(
    r"(pass(word)?|secret|token|api_?key|authorization|credential|private_?key|signing)", re.IGNORECASE
)

_secret_values: tuple[str, ...] = ()
#: strings the masking found nothing to mask in under ``_secret_values``: every line repeats most of
#: its values (event, level, logger, tenant, model), and masking one costs two regular expressions
#: and a search per known secret. Only clean strings are kept (never one that held a secret), short
#: ones, a bounded number; emptied whenever the known secrets change.
_clean: set[str] = set()
_CLEAN_MAX = 1024
_CLEAN_LEN = 256


def question_hash(text: str) -> str:
    """Stable, non-reversible id of a question: lets logs be correlated without storing the text."""
    normalized = " ".join(text.split()).casefold()
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()[:16]


def secret_values_from_settings() -> tuple[str, ...]:
    """Every secret value this process can know of (:func:`credentials.known_values`); the ones the
    settings hold alone when the ragline home is not readable here."""
    settings = get_settings()
    try:
        return tuple(credentials.known_values(settings))
    except OSError:
        return tuple(credentials.setting_values(settings))


def scrub(text: str) -> str:
    """``text`` masked: known secret values and every password written in it."""
    if text in _clean:
        return text
    masked = credentials.mask_text(text, _secret_values)
    if masked == text and len(text) <= _CLEAN_LEN:
        if len(_clean) >= _CLEAN_MAX:
            _clean.clear()
        _clean.add(text)
    return masked


@functools.lru_cache(maxsize=1024)
def _secret_key(key: str) -> bool:
    """Whether a field's name looks like a credential's (the names are the code's: few, repeated)."""
    return _SECRET_KEY.search(key) is not None


def _redact(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    for key, value in list(event.items()):
        if _secret_key(key) and value is not None:
            event[key] = REDACTED
        elif isinstance(value, SecretStr):
            event[key] = REDACTED
        elif isinstance(value, str):
            event[key] = scrub(value)
    return event


def _forbid_question_text(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """A ``question``/``query`` field is replaced by its hash: the text must not be logged."""
    for key in ("question", "query"):
        if isinstance(event.get(key), str):
            event["question_hash"] = question_hash(event.pop(key))
    return event


def _processors(json_output: bool) -> tuple[list, Any]:
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        _forbid_question_text,
        _redact,
    ]
    renderer = (
        structlog.processors.JSONRenderer(ensure_ascii=False)
        if json_output
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    return shared, renderer


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at emit time (test runners swap and close it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure(
    level: str | None = None, json_output: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog and route the standard library's root logger through it (idempotent)."""
    global _secret_values
    settings = get_settings()
    level = (level or settings.ops.log_level).upper()
    json_output = settings.ops.log_json if json_output is None else json_output
    _secret_values = secret_values_from_settings()
    _clean.clear()
    shared, renderer = _processors(json_output)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(formatter)
    handler.set_name("ragline-json")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "ragline-json"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Celery's "Task ... succeeded in 0.003s: <result>" line carries the first KB of every result:
    # document text and answers. ragline logs each task itself (log_ingest, log_query; no content),
    # and failures and retries still come through at WARNING and above. Its "Task ... received" line
    # (celery.worker.strategy) repeats the task_resources line of shared/worker/task_stats.py, on the query
    # pool's consumer thread, for every question: WARNING too.
    for name in ("celery.app.trace", "celery.worker.strategy"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)


def log_query(
    kind: str, *, tenant: str, question: str, latency_ms: float, chunks: int, model: str, **fields: Any
) -> None:
    """One structured line per search/ask: hashed question, latency, chunk count, model, tenant."""
    get_logger("ragline.query").info(
        kind,
        tenant=tenant,
        question_hash=question_hash(question),
        latency_ms=round(latency_ms, 2),
        chunks=chunks,
        model=model,
        **fields,
    )


def log_ingest(
    *, tenant: str, doc_id: str, status: str, chunks: int, model: str, latency_ms: float, **fields: Any
) -> None:
    get_logger("ragline.ingest").info(
        "ingest",
        tenant=tenant,
        doc_id=doc_id,
        status=status,
        chunks=chunks,
        model=model,
        latency_ms=round(latency_ms, 2),
        **fields,
    )
