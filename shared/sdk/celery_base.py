"""The Celery app class of every ragline producer: the worker app and the chat backend's client.

Light on purpose (Celery only): ``ragline.shared.sdk.client`` must not import worker code. Task
behaviour (validation, retries) is the worker side's :mod:`ragline.shared.worker.task_base`.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from celery import Celery
from celery.app import backends
from celery.backends.redis import RedisBackend
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult

from ragline.shared.sdk import redis_acl

#: payload fields that may appear in task events and Flower; never question text, content,
#: vectors, groups or ACLs (the payload itself still travels whole in the message body)
_REPR_FIELDS = ("tenant", "doc_id", "job_id", "mode", "k", "type", "fmt", "version")
_REPR_COUNTS = ("documents", "items", "history")


def payload_summary(args: object) -> str:
    """The ``argsrepr`` of a ragline task: a short, redacted summary of its one dict payload.

    Celery would put ``saferepr(args)`` into the message headers, and from there into every task
    event and Flower's task list: the caller's question, inline document text, a query vector
    and computing that repr sits on every question's round trip."""
    if not (isinstance(args, list | tuple) and len(args) == 1 and isinstance(args[0], dict)):
        return f"<{type(args).__name__} of {len(args) if isinstance(args, list | tuple) else '?'}>"
    p = args[0]
    out = {k: p[k] for k in _REPR_FIELDS if isinstance(p.get(k), str | int | float)}
    out.update({f"n_{k}": len(p[k]) for k in _REPR_COUNTS if isinstance(p.get(k), list)})
    if isinstance(p.get("query"), str):
        out["query_chars"] = len(p["query"])
    return repr(out)


def delete_once_read(client: Any, key: Any) -> None:
    """Delete a result key with ``GETDEL``: a producer's Redis user has no ``DEL``, which would
    reach its queues too (``shared/sdk/redis_acl.py``); a Redis before 6.2 has no ``GETDEL``."""
    import redis.exceptions  # a dependency of Celery's Redis backend, loaded with it

    try:
        client.execute_command("GETDEL", key)
    except redis.exceptions.ResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        client.delete(key)


class OwnResultsBackend(RedisBackend):
    """Celery's Redis result backend, deleting a read result with ``GETDEL`` (:func:`delete_once_read`)."""

    def delete(self, key):
        delete_once_read(self.client, key)


class RaglineCelery(Celery):
    def _get_backend(self):
        """Celery's backend for the configured URL, :class:`OwnResultsBackend` for Redis."""
        backend, url = backends.by_url(self.backend_cls or self.conf.result_backend, self.loader)
        if backend is RedisBackend:
            backend = OwnResultsBackend
        return backend(app=self, url=url)

    def send_task(self, name, args=None, kwargs=None, **options):
        """Every task carries a redacted ``argsrepr`` (see :func:`payload_summary`), not Celery's
        repr of the payload, into its headers, task events and Flower; and an id of the producer's
        Redis role (``<role>-<uuid>``, :func:`ragline.shared.sdk.redis_acl.task_id`), so its Redis user
        reaches its own result and answer stream and no other."""
        if not options.get("task_id"):
            options["task_id"] = redis_acl.task_id(self.conf.broker_url)
        options.setdefault("argsrepr", payload_summary(args or ()))
        options.setdefault("kwargsrepr", "{}" if not kwargs else f"<{len(kwargs)} kwargs>")
        return super().send_task(name, args, kwargs, **options)


def read_once(result: AsyncResult, timeout: float) -> Any:
    """The task's return value, deleted from the result backend once read.

    Answers and summaries carry questions, citations and document ids: nothing should keep them
    in Redis after their one reader has them. A failed or refused task's stored error is read too,
    so it is deleted as well; after a timeout nothing is stored yet and a late result expires on
    its own (``result_expires``).
    """
    try:
        value = result.get(timeout=timeout)
    except CeleryTimeout:
        raise
    except Exception:
        with suppress(Exception):
            result.forget()
        raise
    result.forget()
    return value
