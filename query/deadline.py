"""Deadlines on the query path: one per provider call, and one for the whole question.

Provider clients have their own timeouts and retry policies (tuned for ingestion, where waiting
is fine); a question must not wait for them. The call runs on a per-process thread pool and the
caller stops waiting at the deadline (the thread finishes in the background).

The question's deadline (:func:`question_deadline`) holds in every query pool (Celery enforces
``soft_time_limit`` and ``time_limit`` only in the prefork pool; its solo and threads pools ignore
them). Within a question, every provider call waits at most the time left
(:func:`run_with_deadline`), every retrieval statement gets at most the time left as its
``statement_timeout`` (:func:`statement_timeout_ms`), and a stage that would start after the
deadline raises :class:`QuestionDeadlineExceeded` (:func:`check`). A CPU-bound stage (reading a
long question, choosing sentences, fusing lists) is stopped where it is when the deadline passes
(:func:`ragline.shared.worker.time_limit.time_limit`, in the question's own thread), with the
same error. The deadline lives in a context variable, so each question of a threads pool has its
own.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as DeadlineExceeded
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from ragline.shared.worker.time_limit import TimeLimitExceeded, time_limit

T = TypeVar("T")

__all__ = [
    "DeadlineExceeded",
    "QueryLimitError",
    "QuestionDeadlineExceeded",
    "RetrievalTimeout",
    "check",
    "question_deadline",
    "remaining_s",
    "run_with_deadline",
    "statement_timeout_ms",
]

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None
#: how long after the deadline a stage still running is interrupted: a statement or a provider
#: call ends at the deadline itself (its own timeout is the time left) and says so more precisely,
#: and the fallback it leads to (the fused order, an extractive answer) gets this long to answer
INTERRUPT_AFTER_S = 1.0
#: monotonic time at which the current question's budget ends; None outside a question
_deadline: ContextVar[float | None] = ContextVar("ragline_question_deadline", default=None)


class QueryLimitError(Exception):
    """A question refused or stopped by a query-path limit; the task answers it with an
    ``ErrorResult`` whose ``error`` is :attr:`error` (the client raises ``RaglineError``)."""

    error = "query limit"

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.detail = {"message": message, **detail}


class QuestionDeadlineExceeded(QueryLimitError):
    """The whole question's time is spent (``RAGLINE_DEADLINES_QUESTION_S``)."""

    error = "deadline exceeded"


class RetrievalTimeout(QueryLimitError):
    """A retrieval statement ran past ``RAGLINE_DEADLINES_STATEMENT_TIMEOUT_MS``."""

    error = "retrieval timeout"


def _executor() -> ThreadPoolExecutor:
    """Per process: a forked child must not reuse its parent's threads."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=16, thread_name_prefix="query-call"))
        return _pool[1]


@contextmanager
def question_deadline(seconds: float) -> Iterator[None]:
    """Everything inside is one question that must end within ``seconds`` (0: no deadline), or
    raises :class:`QuestionDeadlineExceeded`, a CPU-bound stage stopped where it is. A nested
    deadline never extends an enclosing one."""
    outer = _deadline.get()
    now = time.monotonic()
    end = now + seconds if seconds > 0 else None
    if outer is not None:
        end = outer if end is None else min(end, outer)
    token = _deadline.set(end)
    try:
        with time_limit(None if end is None else max(end - now + INTERRUPT_AFTER_S, 1e-3)):
            yield
    except TimeLimitExceeded:
        raise QuestionDeadlineExceeded(
            "the question's deadline passed during a stage", stage="cpu-bound stage"
        ) from None
    finally:
        _deadline.reset(token)


def remaining_s() -> float | None:
    """Seconds left of the current question (negative once past), None outside a question."""
    end = _deadline.get()
    return None if end is None else end - time.monotonic()


def check(stage: str) -> None:
    """Raise :class:`QuestionDeadlineExceeded` when the question has no time left for ``stage``."""
    left = remaining_s()
    if left is not None and left <= 0:
        raise QuestionDeadlineExceeded(
            f"the question's deadline passed before {stage}", stage=stage, overrun_ms=round(-left * 1000, 1)
        )


def statement_timeout_ms(limit_ms: int) -> tuple[int, bool]:
    """The ``statement_timeout`` for the next statement: ``limit_ms`` (0 = none) or the time left of
    the question, whichever is shorter, and whether the question's deadline is the shorter one."""
    left = remaining_s()
    if left is None:
        return limit_ms, False
    left_ms = max(1, int(left * 1000))
    if limit_ms <= 0 or left_ms < limit_ms:
        return left_ms, True
    return limit_ms, False


def run_with_deadline(fn: Callable[..., T], timeout_s: float, *args: object) -> T:
    """``fn(*args)``, or :class:`DeadlineExceeded` after ``timeout_s``; exceptions of ``fn`` propagate.

    Inside a question the wait is also bounded by the time left: a call cut by the question's
    deadline raises :class:`QuestionDeadlineExceeded` instead (so is a call that would start
    after it)."""
    left = remaining_s()
    question_bound = left is not None and left < timeout_s
    wait = left if question_bound else timeout_s
    if wait is not None and wait <= 0:
        check("a provider call")
    future = _executor().submit(fn, *args)
    try:
        return future.result(timeout=wait)
    except DeadlineExceeded:
        future.cancel()
        if question_bound:
            raise QuestionDeadlineExceeded(
                "the question's deadline passed during a provider call", stage="provider call"
            ) from None
        raise
