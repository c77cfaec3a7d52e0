"""A small client for chat backends: sends tasks to the query pool by their stable names.

It imports no worker code (only Celery, the contracts and the settings), so a web service can
use it without the ingest or query dependencies being loaded::

    client = RaglineClient("redis://localhost:6379/0")
    answer = client.ask("Как настроить ретраи?", tenant="acme", groups=["staff"])
    for c in answer.citations: ...
    client.sync_acl([{"tenant": "acme", "doc_id": "hr/leave.md", "acl": ["hr"], "version": 7}])
    client.send_event({"type": "delete", "tenant": "acme", "doc_id": "old.md", "version": 3})

Permission syncs and document events go to the ``acl`` queue (the control pool), questions to ``query``.
An asyncio service uses :class:`ragline.AsyncRaglineClient` (``ragline.shared.sdk.async_client``):
the same methods, awaited, without a thread per question.

Replies are validated into the pydantic response models. What can go wrong is typed, the same for
both clients, every class a :class:`RaglineError` (``error``, ``detail``):

* :class:`RaglineUnavailable` (also a built-in ``ConnectionError``): the broker or the result
  backend (Redis) does not answer; nothing was answered, the call may be retried later. A client
  built without a broker URL raises it from its constructor when no embedded Redis is up in the
  ragline home it looked in (``detail``: that ``runtime_file`` and the variables to set);
* :class:`RaglineTimeout` (also a built-in ``TimeoutError``): no worker answered within the
  timeout (the pool is stopped or far behind), or the worker stopped the question at its own
  deadline (``deadline exceeded``, ``retrieval timeout``);
* :class:`RaglineForbidden` (also a built-in ``PermissionError``): Redis refused this client's
  user the task's queue or its reply (a chat backend's user sending an ACL sync): the wrong
  ``REDIS_URL`` user for what it does, never retried;
* :class:`RaglineRateLimited`: the query pool's per-tenant admission refused the question;
  ``retry_after_s`` says at most how long to wait;
* :class:`RaglineError` itself: any other structured error reply of the worker (malformed
  payload, internal error).

A reply is deleted from Redis as soon as it is read (``AsyncResult.forget``); one nobody reads
expires after ``RAGLINE_OPS_RESULT_EXPIRES_S``.

With message signing configured (``RAGLINE_OPS_SIGNING_*``, docs/operations.md) the client signs every
task with its key; the certificate's role decides what the workers run (a chat backend's
``ragline-chat`` certificate: questions only).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any, Literal, NamedTuple

import redis.exceptions
from celery.exceptions import TimeoutError as CeleryTimeout
from kombu import Exchange, Queue
from kombu.exceptions import OperationalError
from pydantic import BaseModel

from ragline.shared.sdk.celery_base import RaglineCelery, read_once
from ragline.shared.sdk.contracts import (
    AclSyncItem,
    AclSyncRequest,
    AclSyncResult,
    AskRequest,
    AskResponse,
    ChatTurn,
    EventResult,
    Hit,
    IngestEvent,
    RerankRequest,
    RerankResponse,
    SearchRequest,
    SearchResponse,
    SourcesRequest,
    SourcesResponse,
)
from ragline.shared.sdk.names import (
    TASK_ACL_SYNC,
    TASK_INGEST_EVENT,
    TASK_QUERY_ASK,
    TASK_QUERY_RERANK,
    TASK_QUERY_RETRIEVE,
    TASK_QUERY_SOURCES,
    TASK_QUEUES,
    TASK_ROUTES,
)

#: the queues a producer sends to: questions, and permission changes and document events
PRODUCER_QUEUES = ("query", "acl")

#: what the broker (kombu) and the result backend (redis-py) raise when Redis does not answer
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OperationalError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    ConnectionError,
)

#: how long a client's result backend retries a lost connection before :class:`RaglineUnavailable`
#: (Celery's default, 20 retries a second apart, keeps a caller waiting 20 s past its own timeout)
BACKEND_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}


class RaglineError(RuntimeError):
    """The worker answered with ``{"ok": false, "error": ..., "detail": ...}``; the base class of
    every error the clients raise on their own."""

    def __init__(self, error: str, detail: Any = None) -> None:
        super().__init__(f"{error}: {detail}" if detail else error)
        self.error = error
        self.detail = detail


class RaglineUnavailable(RaglineError, ConnectionError):
    """The broker or the result backend did not answer (Redis stopped or unreachable): a chat
    backend's 503. The cause (kombu's ``OperationalError``, redis-py's ``ConnectionError``) is
    chained as ``__cause__``."""


class RaglineTimeout(RaglineError, TimeoutError):
    """No answer in time: no worker took the question within the timeout (the pool is stopped or
    behind), or the worker stopped it at the question's deadline. A chat backend's 504."""


class RaglineForbidden(RaglineError, PermissionError):
    """The client's Redis user may not send this task or read its reply (``shared/sdk/redis_acl.py``):
    a chat backend's user sends questions only, a relay's events and permission changes only. A
    misconfigured producer (the wrong ``REDIS_URL`` user), not a passing fault: do not retry."""


class RaglineRateLimited(RaglineError):
    """The query pool's per-tenant admission refused the question (``RAGLINE_ADMISSION_TENANT_*``):
    a chat backend's 429, with ``Retry-After`` from :attr:`retry_after_s`."""

    @property
    def retry_after_s(self) -> float | None:
        value = self.detail.get("retry_after_s") if isinstance(self.detail, dict) else None
        return float(value) if isinstance(value, int | float) else None


#: the worker's ``error`` values that have a class of their own
_TYPED = {
    "rate limited": RaglineRateLimited,
    "deadline exceeded": RaglineTimeout,
    "retrieval timeout": RaglineTimeout,
}


def raise_for_reply(res: Any) -> Any:
    """``res`` unchanged, or the typed :class:`RaglineError` of a structured error reply."""
    if isinstance(res, dict) and res.get("ok") is False:
        error = str(res.get("error", "error"))
        raise _TYPED.get(error, RaglineError)(error, res.get("detail"))
    return res


def unavailable(exc: BaseException) -> RaglineUnavailable | None:
    """The :class:`RaglineUnavailable` for a lost broker or result backend, else None. Celery's
    result consumer reports a backend it could not reconnect to as a ``RuntimeError`` caused by
    the connection error. The detail names the exception's type only: a connection error's text
    may carry the URL."""
    if isinstance(exc, RuntimeError) and not isinstance(exc, RaglineError):
        exc = exc.__cause__ if isinstance(exc.__cause__, CONNECTION_ERRORS) else exc
    if not isinstance(exc, CONNECTION_ERRORS) or isinstance(exc, RaglineError):
        return None
    what = "broker" if isinstance(exc, OperationalError) else "result backend"
    return RaglineUnavailable("unavailable", {"what": what, "cause": type(exc).__name__})


def forbidden(exc: BaseException, task: str, queue: str) -> RaglineForbidden | None:
    """The :class:`RaglineForbidden` for a command Redis refused this client's user, else None
    (kombu reports the refusal of a publish as its ``OperationalError`` caused by it)."""
    if not isinstance(exc, redis.exceptions.NoPermissionError) and not isinstance(
        exc.__cause__, redis.exceptions.NoPermissionError
    ):
        return None
    return RaglineForbidden(
        "forbidden",
        {
            "task": task,
            "queue": queue,
            "message": "this client's Redis user may not send it or read its reply",
        },
    )


def timed_out(task: str, queue: str, timeout: float) -> RaglineTimeout:
    return RaglineTimeout(
        "timeout",
        {
            "task": task,
            "queue": queue,
            "timeout_s": timeout,
            "message": f"no {queue} worker answered in time",
        },
    )


class Call(NamedTuple):
    """One request of the public API: the task, its JSON payload and the reply's model."""

    task: str
    payload: dict
    model: type[BaseModel]

    @property
    def queue(self) -> str:
        """The task's queue, from the one route table (``shared/sdk/names.py``)."""
        return TASK_QUEUES[self.task]


#: the convenience names of a scope, each a string or a list of them (:func:`scope_filters`)
SCOPE_KEYS = ("source", "prefix", "exclude", "prefer")


def scope_filters(
    source: str | None = None,
    prefix: str | Sequence[str] = (),
    exclude: str | Sequence[str] = (),
    prefer: str | Sequence[str] = (),
) -> dict[str, list[str]]:
    """The retrieval contract's path filters for a scope named the way a user thinks of it (pure):
    ``source`` (the first segment of every doc id and path: ``ragline ingest --source``, a git
    source's name) restricts to that source; ``prefix``, ``exclude`` and ``prefer`` are paths
    inside it (or whole stored paths without ``source``) that the search keeps only, leaves out,
    or ranks first (``path_prefixes``, ``exclude_path_prefixes``, ``prefer_path_prefixes``).
    The CLI's ``ask``/``search`` options and both clients' ``source=``, ``prefix=``, ``exclude=``,
    ``prefer=`` keywords all go through here."""

    def paths(value: str | Sequence[str]) -> list[str]:
        items = [value] if isinstance(value, str) else list(value)
        root = f"{source.strip('/')}/" if source else ""
        return [root + p.lstrip("/") for p in items if p]

    out = {
        "path_prefixes": paths(prefix) or ([f"{source.strip('/')}/"] if source else []),
        "exclude_path_prefixes": paths(exclude),
        "prefer_path_prefixes": paths(prefer),
    }
    return {k: v for k, v in out.items() if v}


def with_scope(filters: dict[str, Any]) -> dict[str, Any]:
    """``filters`` with the convenience names of :data:`SCOPE_KEYS` replaced by the contract's
    fields (added to any given directly)."""
    scope = scope_filters(**{k: filters[k] for k in SCOPE_KEYS if filters.get(k)})
    out = {k: v for k, v in filters.items() if k not in SCOPE_KEYS}
    for key, values in scope.items():
        out[key] = [*out.get(key, []), *values]
    return out


def ask_call(
    question: str,
    tenant: str,
    groups: list[str],
    k: int,
    mode: str,
    history: list[ChatTurn | dict] | None,
    filters: dict[str, Any],
) -> Call:
    # validated, not cast: ``mode`` and the filters are the caller's values, checked here
    req = AskRequest.model_validate(
        {
            "query": question,
            "tenant": tenant,
            "groups": groups,
            "k": k,
            "mode": mode,
            "history": [ChatTurn.model_validate(t) for t in history or []],
            **with_scope(filters),
        }
    )
    return Call(TASK_QUERY_ASK, req.model_dump(exclude_defaults=True), AskResponse)


def search_call(
    query: str, tenant: str, groups: list[str], k: int, mode: str, filters: dict[str, Any]
) -> Call:
    req = SearchRequest.model_validate(
        {"query": query, "tenant": tenant, "groups": groups, "k": k, "mode": mode, **with_scope(filters)}
    )
    return Call(TASK_QUERY_RETRIEVE, req.model_dump(exclude_defaults=True), SearchResponse)


def sources_call(tenant: str, groups: list[str]) -> Call:
    req = SourcesRequest(tenant=tenant, groups=groups)
    return Call(TASK_QUERY_SOURCES, req.model_dump(), SourcesResponse)


def rerank_call(query: str, hits: list[Hit], tenant: str, top_k: int | None, threshold: float | None) -> Call:
    req = RerankRequest(query=query, tenant=tenant, hits=hits, top_k=top_k, threshold=threshold)
    return Call(TASK_QUERY_RERANK, req.model_dump(exclude_none=True), RerankResponse)


def sync_acl_call(
    items: Sequence[AclSyncItem | dict],
    missing: Literal["pending", "report"] = "pending",
    force: bool = False,
) -> Call:
    """One ``ragline.acl.sync`` request; the operator's batches (``ragline/operations/acl.py``) are
    these too, with ``missing='report'`` and perhaps ``force``."""
    req = AclSyncRequest(items=[AclSyncItem.model_validate(i) for i in items], missing=missing, force=force)
    return Call(TASK_ACL_SYNC, req.model_dump(mode="json", exclude_none=True), AclSyncResult)


def send_event_call(event: IngestEvent | dict) -> Call:
    ev = IngestEvent.model_validate(event)
    return Call(TASK_INGEST_EVENT, ev.model_dump(mode="json", exclude_none=True), EventResult)


def client_urls(broker_url: str | None, backend_url: str | None) -> tuple[str, str, Any]:
    """``(broker, backend, settings)``: the broker defaults to REDIS_URL / the embedded Redis of
    ``ragline up``, the result backend to the broker. Settings load here, when a client is built,
    not on ``import ragline``."""
    from ragline.shared.config.settings import StackNotUp, get_settings

    settings = get_settings()
    if broker_url is None:
        try:
            broker_url = settings.effective_redis_url()
        except StackNotUp as exc:  # nothing to connect to: the same 503 as a Redis that stopped
            raise stack_not_up(exc) from exc
    return broker_url, backend_url or broker_url, settings


def stack_not_up(exc: Any) -> RaglineUnavailable:
    """The :class:`RaglineUnavailable` of a client built without a broker URL when no embedded
    Redis is up where it looked: the runtime file it read and the variables that point elsewhere."""
    return RaglineUnavailable(
        "unavailable",
        {
            "what": "broker",
            "cause": "not up",
            "runtime_file": str(exc.runtime_file),
            "variables": ["REDIS_URL", "RAGLINE_SERVICES_HOME"],
            "message": str(exc),
        },
    )


def client_app(broker_url: str, backend_url: str | None, settings: Any) -> RaglineCelery:
    """The producer app of both clients: the pools' queue declarations and routes, the client's
    result backend retry policy, signing when configured. ``backend_url`` None: no result
    backend (the asyncio client reads results itself)."""
    # redacted argsrepr: the question never reaches task headers, events or Flower
    app = RaglineCelery("ragline-client", broker=broker_url, backend=backend_url)
    # the pools' queues (shared/worker/celery_app.py), not declared: Celery sends to a direct exchange's
    # queue by pushing onto its list, which holds a message sent before any worker started, and a
    # producer's Redis user may push there and nothing else (no kombu binding sets, shared/sdk/redis_acl.py)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_queues=[
            Queue(q, Exchange(q, type="direct"), routing_key=q, no_declare=True) for q in PRODUCER_QUEUES
        ],
        task_routes={t: r for t, r in TASK_ROUTES.items() if r["queue"] in PRODUCER_QUEUES},
        result_backend_transport_options={"retry_policy": BACKEND_RETRY_POLICY},
    )
    if settings.ops.signing_key_file:
        from ragline.shared.sdk.signing import configure_signing  # signing on: cryptography loads

        configure_signing(app, settings)
    return app


def expires_for(queue: str, timeout: float) -> float | None:
    """A question nobody waits for any more is not answered: a query-queue task expires when its
    caller's wait ends (a pool back from an outage skips the backlog of abandoned questions
    instead of answering it first). Writes (ACL sync, events) never expire."""
    return timeout if queue == "query" else None


class RaglineClient:
    def __init__(
        self,
        broker_url: str | None = None,
        backend_url: str | None = None,
        timeout: float = 60.0,
        app: RaglineCelery | None = None,
    ) -> None:
        """``broker_url`` defaults to REDIS_URL / the embedded Redis of ``ragline up``."""
        if app is None:
            broker_url, backend_url, settings = client_urls(broker_url, backend_url)
            app = client_app(broker_url, backend_url, settings)
        self.app = app
        self.timeout = timeout

    def _call(self, task: str, payload: dict, timeout: float | None, queue: str = "query") -> dict:
        """Send ``task`` and wait for its reply; the typed errors of the module's docstring."""
        timeout = timeout or self.timeout
        result = None
        try:
            result = self.app.send_task(
                task, args=[payload], queue=queue, expires=expires_for(queue, timeout)
            )
            res = read_once(result, timeout)
        except CeleryTimeout:
            # drop the result's subscription now, while Redis answers: left to AsyncResult.__del__,
            # it is dropped whenever the collector runs, then perhaps against a Redis that went away
            with suppress(Exception):
                result.forget()  # type: ignore[union-attr]
            raise timed_out(task, queue, timeout) from None
        except Exception as exc:
            if (lost := forbidden(exc, task, queue) or unavailable(exc)) is not None:
                raise lost from exc
            raise
        return raise_for_reply(res)

    def _run(self, call: Call, timeout: float | None) -> Any:
        return call.model.model_validate(self._call(call.task, call.payload, timeout, queue=call.queue))

    def ask(
        self,
        question: str,
        tenant: str,
        groups: list[str],
        *,
        k: int = 5,
        mode: str = "hybrid",
        history: list[ChatTurn | dict] | None = None,
        timeout: float | None = None,
        **filters: Any,
    ) -> AskResponse:
        return self._run(ask_call(question, tenant, groups, k, mode, history, filters), timeout)

    def search(
        self,
        query: str,
        tenant: str,
        groups: list[str],
        *,
        k: int = 10,
        mode: str = "hybrid",
        timeout: float | None = None,
        **filters: Any,
    ) -> SearchResponse:
        return self._run(search_call(query, tenant, groups, k, mode, filters), timeout)

    def rerank(
        self,
        query: str,
        hits: list[Hit],
        *,
        tenant: str,
        top_k: int | None = None,
        threshold: float | None = None,
        timeout: float | None = None,
    ) -> RerankResponse:
        return self._run(rerank_call(query, hits, tenant, top_k, threshold), timeout)

    def sources(self, tenant: str, groups: list[str], *, timeout: float | None = None) -> SourcesResponse:
        """What is indexed for the caller: its sources with their documents, chunks and commits."""
        return self._run(sources_call(tenant, groups), timeout)

    def sync_acl(self, items: list[AclSyncItem | dict], *, timeout: float | None = None) -> AclSyncResult:
        """Replace documents' permissions (by ``doc_id`` or ``path_prefix``) without re-embedding.

        The server orders changes as it applies them; each item's ``version`` (or ``ts``) is compared
        only with the earlier changes of the same sender (the role of this client's signing key, or
        ``unsigned``) and ``producer`` name, so a replay or a late older one is ignored
        (``ignored_stale``, listed in ``stale``). A version more than ``RAGLINE_LIFECYCLE_MAX_CLOCK_SKEW_S``
        ahead of the server's clock is refused. A ``doc_id`` not ingested yet keeps the permission
        for its first ingest."""
        return self._run(sync_acl_call(items), timeout)

    def send_event(self, event: IngestEvent | dict, *, timeout: float | None = None) -> EventResult:
        """A document changed upstream: ``upsert`` (re-ingest ``uri``), ``delete`` or ``acl``."""
        return self._run(send_event_call(event), timeout)
