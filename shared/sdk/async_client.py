"""The chat backend's client for asyncio services: :class:`RaglineClient`'s methods, awaited.

A synchronous client waits for each reply in a thread (Celery's ``AsyncResult.get``), so an asyncio
chat backend answering 200 users at once would need 200 threads. This client awaits every reply on
one event loop instead::

    async with AsyncRaglineClient("redis://localhost:6379/0") as client:
        answer = await client.ask("Как настроить ретраи?", tenant="acme", groups=["staff"])

How a reply is awaited: Celery's Redis result backend stores a task's result under its key
(``celery-task-meta-<id>``) and publishes the same value on a pub/sub channel of the same name
(``RedisBackend._set``). The client subscribes to that channel on one shared ``redis.asyncio``
connection *before* it sends the task, so no reply can slip past, and every ``poll_s`` seconds it
also reads the key itself, so a reply published while the subscription was reconnecting is found
too. A reply is deleted from Redis once read, as the synchronous client does (``read_once``).

Sending goes through the same Celery app and producer as the synchronous client (routes, the
redacted ``argsrepr``, message signing), on one publishing thread of the client's own: a publish
to a live broker takes well under a millisecond, but to a broker that went away kombu retries for
a while, and that must not stall the event loop. One thread per client, not one per question.

A question whose awaiting task is cancelled (``asyncio.CancelledError``: the user went away, a
``wait_for`` ran out) is revoked (a worker skips it if it has not started) and its late reply, if
one still comes, is deleted when it arrives, so nothing of it stays in Redis.

Errors are the synchronous client's (:mod:`ragline.shared.sdk.client`): :class:`RaglineUnavailable`,
:class:`RaglineTimeout`, :class:`RaglineRateLimited`, :class:`RaglineError`.

One client serves one event loop at a time (``redis.asyncio`` connections belong to a loop); close
it with ``await client.aclose()`` or ``async with``. Extensions read its parts as attributes:
``app`` (the Celery producer app), ``backend`` (key names and decoding of results), ``redis``
(the ``redis.asyncio`` client of the result backend) and ``backend_url``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import redis.asyncio as aioredis
from celery import states
from celery.backends.redis import RedisBackend
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from ragline.shared.sdk import names, redis_acl
from ragline.shared.sdk.answer_stream import ERROR, AnswerEvent, read_answer
from ragline.shared.sdk.celery_base import RaglineCelery
from ragline.shared.sdk.client import (
    Call,
    RaglineError,
    ask_call,
    client_app,
    client_urls,
    expires_for,
    forbidden,
    raise_for_reply,
    rerank_call,
    search_call,
    send_event_call,
    sources_call,
    sync_acl_call,
    timed_out,
    unavailable,
)
from ragline.shared.sdk.contracts import (
    AclSyncItem,
    AclSyncResult,
    AskResponse,
    ChatTurn,
    EventResult,
    Hit,
    IngestEvent,
    RerankResponse,
    SearchResponse,
    SourcesResponse,
)

__all__ = ["AsyncRaglineClient"]


async def delete_once_read(client: aioredis.Redis, key: bytes) -> None:
    """:func:`ragline.shared.sdk.celery_base.delete_once_read`, awaited: ``GETDEL``, ``DEL`` on a
    Redis before 6.2."""
    try:
        await client.execute_command("GETDEL", key)
    except aioredis.ResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        await client.delete(key)


class _Replies:
    """Every awaited reply of one client on one event loop, over one pub/sub connection.

    The connection stays subscribed to a channel of its own, so its reader always has something to
    read and redis-py resubscribes every channel after a reconnect."""

    def __init__(self, client: aioredis.Redis, backend: RedisBackend, url: str) -> None:
        self.backend = backend
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        self.waiters: dict[bytes, asyncio.Future] = {}
        self.anchor = redis_acl.reply_channel(url).encode()
        self.reader: asyncio.Task | None = None

    async def start(self) -> None:
        await self.pubsub.subscribe(self.anchor)
        self.reader = asyncio.create_task(self._read(), name="ragline-replies")

    def ready_meta(self, value: bytes | None) -> dict | None:
        """The decoded result of a stored or published value, when it is a final state (the
        control pool's tasks publish STARTED first)."""
        if value is None:
            return None
        meta = self.backend.decode_result(value)
        return meta if meta.get("status") in states.READY_STATES else None

    async def _read(self) -> None:
        while True:
            try:
                message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception:  # connection lost: redis-py reconnects on the next read; waiters poll
                await asyncio.sleep(0.2)
                continue
            if not message or message.get("type") != "message":
                continue
            waiter = self.waiters.get(message["channel"])
            if waiter is not None and not waiter.done():
                with contextlib.suppress(Exception):  # a value that does not decode: the poll reads it
                    if (meta := self.ready_meta(message["data"])) is not None:
                        waiter.set_result(meta)

    @contextlib.asynccontextmanager
    async def watch(self, key: bytes) -> AsyncIterator[asyncio.Future]:
        """Subscribed to ``key`` inside: the future gets the task's final result meta."""
        waiter = asyncio.get_running_loop().create_future()
        self.waiters[key] = waiter
        try:
            await self.pubsub.subscribe(key)
            yield waiter
        finally:
            if self.waiters.get(key) is waiter:
                del self.waiters[key]
            with contextlib.suppress(Exception):  # a lost connection has no subscription to drop
                await self.pubsub.unsubscribe(key)

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(BaseException):
                await self.reader
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()


class AsyncRaglineClient:
    """:class:`ragline.RaglineClient` for asyncio: the same methods and errors, awaited."""

    def __init__(
        self,
        broker_url: str | None = None,
        backend_url: str | None = None,
        timeout: float = 60.0,
        *,
        poll_s: float = 1.0,
    ) -> None:
        """``broker_url`` defaults to REDIS_URL / the embedded Redis of ``ragline up``, the result
        backend to the broker; ``poll_s``: how often an awaited reply is also read from its key."""
        broker_url, backend_url, settings = client_urls(broker_url, backend_url)
        # no result backend on the app: Celery's would subscribe every sent task on a blocking
        # connection of its own; replies are read here
        self.app: RaglineCelery = client_app(broker_url, None, settings)
        self.backend_url = backend_url
        self.backend = RedisBackend(app=self.app, url=backend_url)  # key names and decoding only
        self.timeout = timeout
        self.poll_s = poll_s
        self._publisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragline-publish")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._replies: _Replies | None = None
        self._starting: asyncio.Lock | None = None
        self._cleanups: set[asyncio.Task] = set()
        self.redis = self._new_redis()

    def _new_redis(self) -> aioredis.Redis:
        # a stopped Redis is reported within about a second instead of redis-py's default backoff
        retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=2)
        return aioredis.Redis.from_url(self.backend_url, socket_connect_timeout=5, retry=retry)

    async def __aenter__(self) -> AsyncRaglineClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the reply reader, wait for pending clean-ups, close the connections."""
        if self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)
        if self._replies is not None:
            await self._replies.close()
            self._replies = None
        with contextlib.suppress(Exception):
            await self.redis.aclose()
        self._publisher.shutdown(wait=True)

    async def _get_replies(self) -> _Replies:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop: the old loop's connections are unusable
            if self._loop is not None:
                self.redis = self._new_redis()
            self._loop, self._replies, self._starting = loop, None, asyncio.Lock()
        async with self._starting:  # type: ignore[union-attr]
            if self._replies is None:
                replies = _Replies(self.redis, self.backend, self.backend_url)
                await replies.start()
                self._replies = replies
        return self._replies

    async def publish(
        self, task: str, payload: dict, queue: str, task_id: str | None = None, expires: float | None = None
    ) -> str:
        """Send ``task`` with its one payload through the Celery producer, off the event loop;
        its task id. Nothing is awaited from it (``_call`` subscribes first)."""
        task_id = task_id or redis_acl.task_id(self.backend_url)
        send = partial(
            self.app.send_task, task, args=[payload], queue=queue, task_id=task_id, expires=expires
        )
        await asyncio.get_running_loop().run_in_executor(self._publisher, send)
        return task_id

    def result_key(self, task_id: str) -> bytes:
        """The result backend's key of ``task_id``, also the channel its result is published on."""
        return self.backend.get_key_for_task(task_id)

    async def _wait(self, key: bytes, waiter: asyncio.Future, timeout: float) -> dict | None:
        """The final result meta, or None after ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            try:
                return await asyncio.wait_for(asyncio.shield(waiter), min(self.poll_s, left))
            except TimeoutError:
                pass
            meta = self._replies.ready_meta(await self.redis.get(key)) if self._replies else None
            if meta is not None:
                return meta
        return None

    async def _call(self, task: str, payload: dict, timeout: float | None, queue: str = "query") -> dict:
        """Send ``task``, await its reply and delete it from Redis; the typed errors of
        :mod:`ragline.shared.sdk.client`."""
        timeout = timeout or self.timeout
        task_id = redis_acl.task_id(self.backend_url)
        key = self.result_key(task_id)
        try:
            replies = await self._get_replies()
            async with replies.watch(key) as waiter:
                try:
                    await self.publish(task, payload, queue, task_id, expires_for(queue, timeout))
                    meta = await self._wait(key, waiter, timeout)
                except asyncio.CancelledError:  # also while publishing: the message may be out
                    self._forget_later(task_id, key, timeout)
                    raise
            if meta is None:
                raise timed_out(task, queue, timeout)
            await delete_once_read(self.redis, key)
        except RaglineError:
            raise
        except Exception as exc:
            if (lost := forbidden(exc, task, queue) or unavailable(exc)) is not None:
                raise lost from exc
            raise
        if (
            meta["status"] in states.PROPAGATE_STATES
        ):  # a failed or refused task, as AsyncResult.get raises it
            raise self.backend.exception_to_python(meta["result"])
        return raise_for_reply(meta["result"])

    def _forget_later(self, task_id: str, key: bytes, timeout: float) -> None:
        """A cancelled question: revoke it, and delete its reply if one still comes within ``timeout``
        (a worker that had already started it still answers). A producer's Redis user may not
        broadcast (``redis_acl.may_broadcast``): its question is not revoked, and expires when its
        caller's wait would have ended."""
        if redis_acl.may_broadcast(self.backend_url):
            self._publisher.submit(
                self.app.control.broadcast, names.CONTROL_CANCEL_QUESTION, arguments={"task_id": task_id}
            )
        cleanup = asyncio.get_running_loop().create_task(self._delete_when_done(key, timeout))
        self._cleanups.add(cleanup)
        cleanup.add_done_callback(self._cleanups.discard)

    async def _delete_when_done(self, key: bytes, timeout: float) -> None:
        with contextlib.suppress(Exception):
            replies = await self._get_replies()
            async with replies.watch(key) as waiter:
                await self._wait(key, waiter, timeout)
            await delete_once_read(self.redis, key)

    async def _run(self, call: Call, timeout: float | None) -> Any:
        return call.model.model_validate(await self._call(call.task, call.payload, timeout, queue=call.queue))

    async def ask(
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
        return await self._run(ask_call(question, tenant, groups, k, mode, history, filters), timeout)

    async def ask_stream(
        self,
        question: str,
        tenant: str,
        groups: list[str],
        *,
        k: int = 5,
        mode: str = "hybrid",
        history: list[ChatTurn | dict] | None = None,
        timeout: float | None = None,
        task_id: str | None = None,
        **filters: Any,
    ) -> AsyncIterator[AnswerEvent]:
        """:meth:`ask` with the answer streamed (:mod:`ragline.shared.sdk.answer_stream`): ``delta``
        events as the chat model writes, then one ``answer`` or ``no_answer`` event whose response
        replaces the streamed text. ``timeout`` bounds each wait for the next event. An ``error``
        event raises the typed error :meth:`ask` would; a caller that stops early gets the
        question revoked. ``task_id`` (default: a new one) names the question's stream: a reader
        that lost its connection resumes with ``read_answer(client.redis, task_id, after=<the
        last event's id>)`` and misses nothing."""
        call = ask_call(question, tenant, groups, k, mode, history, {**filters, "stream": True})
        timeout = timeout or self.timeout
        task_id = task_id or redis_acl.task_id(self.backend_url)
        key = self.result_key(task_id)
        ended = False
        try:
            await self.publish(call.task, call.payload, call.queue, task_id, expires_for(call.queue, timeout))
            async for event in read_answer(self.redis, task_id, timeout=timeout):
                ended = event.final
                if event.type == ERROR:
                    raise_for_reply({"ok": False, "error": event.error, "detail": event.detail})
                yield event
        except RaglineError:
            raise
        except Exception as exc:
            if (lost := forbidden(exc, call.task, call.queue) or unavailable(exc)) is not None:
                raise lost from exc
            raise
        finally:
            if ended:  # the task's own reply (the same response) is not read: deleted when it lands
                cleanup = asyncio.get_running_loop().create_task(self._delete_when_done(key, timeout))
                self._cleanups.add(cleanup)
                cleanup.add_done_callback(self._cleanups.discard)
            else:
                self._forget_later(task_id, key, timeout)

    async def search(
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
        return await self._run(search_call(query, tenant, groups, k, mode, filters), timeout)

    async def rerank(
        self,
        query: str,
        hits: list[Hit],
        *,
        tenant: str,
        top_k: int | None = None,
        threshold: float | None = None,
        timeout: float | None = None,
    ) -> RerankResponse:
        return await self._run(rerank_call(query, hits, tenant, top_k, threshold), timeout)

    async def sources(
        self, tenant: str, groups: list[str], *, timeout: float | None = None
    ) -> SourcesResponse:
        """:meth:`ragline.RaglineClient.sources`, awaited."""
        return await self._run(sources_call(tenant, groups), timeout)

    async def sync_acl(
        self, items: list[AclSyncItem | dict], *, timeout: float | None = None
    ) -> AclSyncResult:
        """:meth:`ragline.RaglineClient.sync_acl`, awaited."""
        return await self._run(sync_acl_call(items), timeout)

    async def send_event(self, event: IngestEvent | dict, *, timeout: float | None = None) -> EventResult:
        """:meth:`ragline.RaglineClient.send_event`, awaited."""
        return await self._run(send_event_call(event), timeout)
