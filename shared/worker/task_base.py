"""The base class of every ragline task: the worker app's ``task_cls``.

Each task is a thin function over a pure stage; what every task needs the same way lives here
once, in Celery's own machinery:

* **payload validation**: a task with ``payload_model`` receives the validated model; a payload
  that does not validate returns an :class:`ErrorResult` (the caller learns why, the worker
  stays up, nothing is retried). The worker validates with its own clock and vector dimension in
  the context (:func:`server_context`): versions too far ahead and vectors of another length are
  refused here, whatever the producer's settings;
* **infrastructure retries**: Postgres or Redis going away (``INFRASTRUCTURE_ERRORS``) retries
  the task with exponential backoff and full jitter (Celery's ``autoretry_for``); the tasks are
  idempotent, so a retry re-applies only what is still missing;
* **contained errors** (``contain_errors``): a query task answers a waiting chat backend, so an
  unexpected failure becomes ``{"ok": false, "error": "internal error"}``, never a traceback or a
  secret in the result;
* **admission**: the consumer refuses, before the task is reserved, a message whose signer's role
  may not send it (message signing on) and any message carrying Celery canvas options (``link``,
  chains, chords, groups) that no worker or operator signed (``Strategy``,
  :func:`ragline.shared.sdk.signing.role_strategy`, deciding by :func:`ragline.shared.sdk.signing.refusal`).
"""

from __future__ import annotations

import functools
import logging
import time

from celery import Task
from pydantic import BaseModel, ValidationError

from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import ErrorResult
from ragline.shared.sdk.contracts.common import ServerContext
from ragline.shared.worker.transient import INFRASTRUCTURE_ERRORS

log = logging.getLogger(__name__)


def server_context() -> ServerContext:
    """What the contracts check only where the server validates: its clock and its vector dimension."""
    settings = get_settings()
    return ServerContext(
        now=time.time(), max_clock_skew_s=settings.lifecycle.max_clock_skew_s, embed_dim=settings.embed.dim
    )


class RaglineTask(Task):
    #: the payload model: the task function receives the validated model instead of the dict
    payload_model: type[BaseModel] | None = None
    #: an unexpected exception becomes an ``internal error`` result instead of a failed task
    contain_errors: bool = False

    autoretry_for = INFRASTRUCTURE_ERRORS
    retry_backoff = True
    retry_backoff_max = 60
    retry_jitter = True
    max_retries = 5
    acks_late = True
    #: Celery's default strategy, behind the admission check (signer's role, canvas options)
    Strategy = "ragline.shared.sdk.signing:role_strategy"

    def __init_subclass__(cls, **kwargs):
        """Celery builds one subclass per task with the function as ``run``: wrap it so it receives
        the validated model. The wrapping happens here, not in ``__call__``, because Celery records
        the arguments ``__call__`` receives as the request's, and a retry re-sends those: they must
        stay the JSON payload."""
        super().__init_subclass__(**kwargs)
        raw = cls.__dict__.get("run")
        if raw is None or cls.payload_model is None:
            return
        bound = not isinstance(raw, staticmethod)
        fn = raw if bound else raw.__func__
        model = cls.payload_model

        @functools.wraps(fn)
        def run(*args, **kw):
            head, rest = (args[:1], args[1:]) if bound else ((), args)
            if not rest:  # no payload at all: the function's own TypeError
                return fn(*args, **kw)
            try:
                req = model.model_validate(rest[0], context=server_context())
            except ValidationError as exc:
                return ErrorResult.invalid_payload(exc)
            return fn(*head, req, *rest[1:], **kw)

        cls.run = run if bound else staticmethod(run)

    def __call__(self, *args, **kwargs):
        if not self.contain_errors:
            return super().__call__(*args, **kwargs)
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            log.exception("%s failed", self.name)
            return ErrorResult(error="internal error", detail=type(exc).__name__).model_dump()
