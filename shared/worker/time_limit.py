"""A time limit that stops CPU-bound Python code in the thread that set it, in any pool.

Celery enforces ``soft_time_limit`` with a signal, in the prefork pool only and for a whole task;
a document's parser or a question's stage needs its own limit, in the threads and solo pools too.
:func:`time_limit` raises :class:`TimeLimitExceeded` in the calling thread once its time is spent
(``PyThreadState_SetAsyncExc``, the mechanism of a signal's exception without the signal: raised
between two Python bytecodes, so a loop of pure Python stops at once). Code inside one C call
(a regular expression, a statement, a socket read) stops when that call returns: such calls keep
their own bounds (linear patterns, ``statement_timeout``, provider timeouts).

The exception derives from ``BaseException`` so that a library's ``except Exception`` fallback
does not swallow it, and it is raised again every :data:`REPEAT_S` until the block is left in case
one does; the block turns it into the caller's own error (a document's failure, a question's
deadline).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TimeLimitExceeded", "time_limit"]

#: how often the exception is raised again while the limited block has not ended
REPEAT_S = 0.5

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)


class TimeLimitExceeded(BaseException):  # noqa: N818 - what the limited code sees, like KeyboardInterrupt
    """Raised in a thread whose :func:`time_limit` is spent."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Run the block in this thread; past ``seconds`` (None or <= 0: no limit) it is interrupted
    with :class:`TimeLimitExceeded`, which propagates out of the block. Limits nest: an inner block
    that outlives an outer limit is interrupted by the outer one."""
    if seconds is None or seconds <= 0:
        yield
        return
    thread_id = threading.get_ident()
    lock = threading.Lock()
    state = {"done": False, "fired": False}
    timers: list[threading.Timer] = []

    def fire() -> None:
        with lock:
            if state["done"]:
                return
            state["fired"] = True
            _set_async_exc(thread_id, TimeLimitExceeded)
            again = threading.Timer(REPEAT_S, fire)
            again.daemon = True
            timers.append(again)
            again.start()

    first = threading.Timer(seconds, fire)
    first.daemon = True
    timers.append(first)
    first.start()
    try:
        yield
    finally:
        with lock:
            state["done"] = True
            for timer in timers:
                timer.cancel()
            if state["fired"]:  # raised already, or still pending: never after the block
                _set_async_exc(thread_id, ctypes.py_object())
