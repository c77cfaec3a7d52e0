"""Retry policy for provider HTTP calls (tenacity): exponential backoff with jitter on 429, 5xx,
timeouts and connection errors, never shorter than the server's ``Retry-After``."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from ragline.shared.worker.metrics import EMBED_429, EMBED_RETRIES
from ragline.shared.worker.providers import ProviderError

T = TypeVar("T")


class TransientProviderError(Exception):
    """A failure worth retrying; ``retry_after`` is the server's hint in seconds, if any."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def parse_retry_after(value: object) -> float | None:
    try:
        return max(0.0, float(str(value).strip())) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def call_with_retries(
    fn: Callable[[], T],
    provider: str,
    attempts: int,
    base_s: float,
    cap_s: float,
    retry_after_cap_s: float = 60.0,
) -> T:
    """Run ``fn`` until it succeeds or ``attempts`` are used; transient errors are re-raised last."""
    backoff = wait_exponential_jitter(initial=base_s, max=cap_s, jitter=base_s)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hint = getattr(exc, "retry_after", None)
        own = backoff(state)
        if hint is None:
            return own
        return max(min(hint, retry_after_cap_s) + random.uniform(0, base_s), min(own, cap_s))

    def before_sleep(state: RetryCallState) -> None:
        EMBED_RETRIES.labels(provider).inc()

    def counted() -> T:
        try:
            return fn()
        except TransientProviderError as exc:
            if exc.status == 429:
                EMBED_429.labels(provider).inc()
            raise

    retrying = Retrying(
        stop=stop_after_attempt(max(1, attempts)),
        wait=wait,
        reraise=True,
        retry=retry_if_exception_type(TransientProviderError),
        before_sleep=before_sleep,
    )
    try:
        return retrying(counted)
    except TransientProviderError as exc:
        raise ProviderError(
            f"{exc} (gave up after {attempts} attempt{'s' if attempts != 1 else ''})"
        ) from exc
