"""A small client for chat backends: sends tasks to the query pool by their stable names.

It imports no worker code (only Celery, the contracts and the settings), so a web service can
use it without the ingest or query dependencies being loaded::

    client = RaglineClient("redis://localhost:6379/0")
    answer = client.ask("Как настроить ретраи?", tenant="acme", groups=["staff"])
    for c in answer.citations: ...
    client.sync_acl([{"tenant": "acme", "doc_id": "hr/leave.md", "acl": ["hr"], "version": 7}])
    client.send_event({"type": "delete", "tenant": "acme", "doc_id": "old.md", "version": 3})

Permission syncs and document events go to the ``acl`` queue (the control pool), questions to ``query``.

Replies are validated into the pydantic response models; a structured error reply from the
worker (malformed payload, internal error) raises :class:`RaglineError`. A reply is deleted from
Redis as soon as it is read (``AsyncResult.forget``); one nobody reads expires after
``RAGLINE_RESULT_EXPIRES_S``.

With message signing configured (``RAGLINE_SIGNING_*``, docs/operations.md) the client signs every
task with its key; the certificate's role decides what the workers run (a chat backend's
``ragline-chat`` certificate: questions only).
"""

from __future__ import annotations

from typing import Any

from kombu import Exchange, Queue

from ragline.shared.celery_base import RaglineCelery, read_once
from ragline.shared.contracts import (
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
)
from ragline.shared.names import (
    TASK_ACL_SYNC,
    TASK_INGEST_EVENT,
    TASK_QUERY_ASK,
    TASK_QUERY_RERANK,
    TASK_QUERY_RETRIEVE,
)


class RaglineError(RuntimeError):
    """The worker answered with ``{"ok": false, "error": ..., "detail": ...}``."""

    def __init__(self, error: str, detail: Any = None) -> None:
        super().__init__(f"{error}: {detail}" if detail else error)
        self.error = error
        self.detail = detail


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
            # start-up: pydantic-settings loads when a client is built, not on `import ragline`
            from ragline.shared.settings import get_settings

            settings = get_settings()
            if broker_url is None:
                broker_url = settings.effective_redis_url()
            # redacted argsrepr: the question never reaches task headers, events or Flower
            app = RaglineCelery("ragline-client", broker=broker_url, backend=backend_url or broker_url)
            # the same queue declaration as the pools (shared/celery_app.py), so a message sent before
            # any worker started is not lost
            app.conf.update(
                task_serializer="json",
                result_serializer="json",
                accept_content=["json"],
                task_queues=[Queue(q, Exchange(q, type="direct"), routing_key=q) for q in ("query", "acl")],
                task_routes={
                    "ragline.query.*": {"queue": "query", "routing_key": "query"},
                    "ragline.acl.*": {"queue": "acl", "routing_key": "acl"},
                    TASK_INGEST_EVENT: {"queue": "acl", "routing_key": "acl"},
                },
            )
            if settings.ops.signing_key_file:
                from ragline.shared.signing import configure_signing  # signing on: cryptography loads

                configure_signing(app, settings)
        self.app = app
        self.timeout = timeout

    def _call(self, task: str, payload: dict, timeout: float | None, queue: str = "query") -> dict:
        res = read_once(self.app.send_task(task, args=[payload], queue=queue), timeout or self.timeout)
        if isinstance(res, dict) and res.get("ok") is False:
            raise RaglineError(res.get("error", "error"), res.get("detail"))
        return res

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
        req = AskRequest(
            query=question,
            tenant=tenant,
            groups=groups,
            k=k,
            mode=mode,
            history=[ChatTurn.model_validate(t) for t in history or []],
            **filters,
        )
        return AskResponse.model_validate(
            self._call(TASK_QUERY_ASK, req.model_dump(exclude_defaults=True), timeout)
        )

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
        req = SearchRequest(query=query, tenant=tenant, groups=groups, k=k, mode=mode, **filters)
        return SearchResponse.model_validate(
            self._call(TASK_QUERY_RETRIEVE, req.model_dump(exclude_defaults=True), timeout)
        )

    def rerank(
        self,
        query: str,
        hits: list[Hit],
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        timeout: float | None = None,
    ) -> RerankResponse:
        req = RerankRequest(query=query, hits=hits, top_k=top_k, threshold=threshold)
        return RerankResponse.model_validate(
            self._call(TASK_QUERY_RERANK, req.model_dump(exclude_none=True), timeout)
        )

    def sync_acl(self, items: list[AclSyncItem | dict], *, timeout: float | None = None) -> AclSyncResult:
        """Replace documents' permissions (by ``doc_id`` or ``path_prefix``) without re-embedding.

        The server orders changes as it applies them; each item's ``version`` (or ``ts``) is compared
        only with the same ``producer``'s earlier changes, so a replay or a late older one is ignored
        (``ignored_stale``). A ``doc_id`` not ingested yet keeps the permission for its first ingest."""
        req = AclSyncRequest(items=[AclSyncItem.model_validate(i) for i in items])
        return AclSyncResult.model_validate(
            self._call(TASK_ACL_SYNC, req.model_dump(mode="json", exclude_none=True), timeout, queue="acl")
        )

    def send_event(self, event: IngestEvent | dict, *, timeout: float | None = None) -> EventResult:
        """A document changed upstream: ``upsert`` (re-ingest ``uri``), ``delete`` or ``acl``."""
        ev = IngestEvent.model_validate(event)
        return EventResult.model_validate(
            self._call(TASK_INGEST_EVENT, ev.model_dump(mode="json", exclude_none=True), timeout, queue="acl")
        )
