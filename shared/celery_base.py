"""The Celery app class of every ragline producer: the worker app and the chat backend's client.

Light on purpose (Celery only): ``ragline.shared.client`` must not import worker code. Task
behaviour (validation, retries) is the worker side's :mod:`ragline.shared.task_base`.
"""

from __future__ import annotations

from celery import Celery

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


class RaglineCelery(Celery):
    def send_task(self, name, args=None, kwargs=None, **options):
        """Every task carries a redacted ``argsrepr`` (see :func:`payload_summary`), not Celery's
        repr of the payload, into its headers, task events and Flower."""
        options.setdefault("argsrepr", payload_summary(args or ()))
        options.setdefault("kwargsrepr", "{}" if not kwargs else f"<{len(kwargs)} kwargs>")
        return super().send_task(name, args, kwargs, **options)
