"""Run a provider call with a hard deadline on the query path.

Provider clients have their own timeouts and retry policies (tuned for ingestion, where waiting
is fine); a question must not wait for them. The call runs on a per-process thread pool and the
caller stops waiting at the deadline (the thread finishes in the background).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as DeadlineExceeded
from typing import TypeVar

T = TypeVar("T")

__all__ = ["DeadlineExceeded", "run_with_deadline"]

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def _executor() -> ThreadPoolExecutor:
    """Per process: a forked child must not reuse its parent's threads."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=16, thread_name_prefix="query-call"))
        return _pool[1]


def run_with_deadline(fn: Callable[..., T], timeout_s: float, *args: object) -> T:
    """``fn(*args)``, or :class:`DeadlineExceeded` after ``timeout_s``; exceptions of ``fn`` propagate."""
    future = _executor().submit(fn, *args)
    try:
        return future.result(timeout=timeout_s)
    except DeadlineExceeded:
        future.cancel()
        raise
