"""Typed errors of both clients against a really stopped broker and a really stopped query pool.

A private redis-server (the embedded stack's binary) on its own port stands for the broker: no
worker consumes its queues (the query pool is stopped), and the test stops and restarts it (the
broker goes down under a client that was working). Rate limiting runs through the session worker.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import redis

from ragline.shared.sdk.async_client import AsyncRaglineClient
from ragline.shared.sdk.client import (
    RaglineClient,
    RaglineError,
    RaglineRateLimited,
    RaglineTimeout,
    RaglineUnavailable,
    raise_for_reply,
)
from tests.integration.query_corpus import store_docs

REPO = Path(__file__).resolve().parents[2]
#: well past the clients' own bounds (a 1 s timeout; about a second of reconnecting), far below
#: Celery's default 20 s of result-backend reconnects this replaced
NO_HANG_S = 10.0


class PrivateRedis:
    """A redis-server of the test's own, stopped and restarted on the same port."""

    def __init__(self, tmp_path: Path) -> None:
        from ragline.shared.stack.services import free_port

        self.port = free_port()
        self.dir = tmp_path
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        from ragline.shared.stack.services import redis_server_binary

        argv = [str(redis_server_binary()), "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        for _ in range(200):
            try:
                client.ping()
                return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("private redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(15)
            self.proc = None

    def queued(self, queue: str) -> int:
        return int(redis.Redis.from_url(self.url).llen(queue))


@pytest.fixture()
def broker(tmp_path):
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


class Clients:
    """Run the same call through the synchronous or the asyncio client."""

    def __init__(self, kind: str, url: str, timeout: float) -> None:
        self.kind = kind
        self.client = (RaglineClient if kind == "sync" else AsyncRaglineClient)(url, timeout=timeout)

    def call(self, method: str, *args, **kw):
        fn = getattr(self.client, method)
        return fn(*args, **kw) if self.kind == "sync" else asyncio.run(fn(*args, **kw))

    def close(self) -> None:
        if self.kind == "async":
            asyncio.run(self.client.aclose())


def _raises(clients: Clients, exc_type: type[BaseException]) -> tuple[BaseException, float]:
    t = time.monotonic()
    with pytest.raises(exc_type) as err:
        clients.call("search", "ретраи", tenant="t-errors", groups=["g"], mode="lexical")
    return err.value, time.monotonic() - t


def test_error_classes_and_worker_replies():
    assert issubclass(RaglineTimeout, TimeoutError) and issubclass(RaglineTimeout, RaglineError)
    assert issubclass(RaglineUnavailable, ConnectionError) and issubclass(RaglineUnavailable, RaglineError)
    limited = {"ok": False, "error": "rate limited", "detail": {"retry_after_s": 2.0, "tenant": "a"}}
    with pytest.raises(RaglineRateLimited) as err:
        raise_for_reply(limited)
    assert err.value.retry_after_s == 2.0 and err.value.detail["tenant"] == "a"
    for error in ("deadline exceeded", "retrieval timeout"):  # the worker's own deadlines: also a 504
        with pytest.raises(RaglineTimeout):
            raise_for_reply({"ok": False, "error": error, "detail": {"message": "x"}})
    with pytest.raises(RaglineError) as err:
        raise_for_reply({"ok": False, "error": "invalid payload", "detail": []})
    assert type(err.value) is RaglineError
    assert raise_for_reply({"hits": []}) == {"hits": []}


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_stopped_pool_then_stopped_broker(broker, kind):
    clients = Clients(kind, broker.url, timeout=1.0)
    try:
        # no worker consumes the queue: a timeout, typed, with the question still queued (not lost)
        err, took = _raises(clients, RaglineTimeout)
        assert isinstance(err, TimeoutError) and err.detail["queue"] == "query" and took < NO_HANG_S
        assert broker.queued("query") == 1
        # and it expires when the wait ended: a pool that comes back skips it instead of answering
        message = json.loads(redis.Redis.from_url(broker.url).lindex("query", 0))
        expires = dt.datetime.fromisoformat(message["headers"]["expires"])
        assert abs((expires - dt.datetime.now(dt.UTC)).total_seconds()) < NO_HANG_S

        broker.stop()  # the broker goes away under a client that was working
        err, took = _raises(clients, RaglineUnavailable)
        assert isinstance(err, ConnectionError) and err.detail["what"] in ("broker", "result backend")
        assert broker.url not in str(err) and took < NO_HANG_S

        broker.start()  # back on the same port: the same client works again, nothing to restart
        _raises(clients, RaglineTimeout)
    finally:
        clients.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_broker_never_there(broker, kind):
    broker.stop()
    clients = Clients(kind, broker.url, timeout=1.0)
    try:
        err, took = _raises(clients, RaglineUnavailable)
        assert err.__cause__ is not None and took < NO_HANG_S
    finally:
        clients.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_tenant_over_its_rate_is_rate_limited(celery_worker, stack, conn, tenant, use_settings, kind):
    store_docs(conn, tenant, [{"doc_id": "a.md", "content": "Ретраи настраиваются в конфиге."}], dim=384)
    # one question per 10 s window: the second one is refused whatever the machine's load
    use_settings(admission_tenant_rate=0.1, admission_tenant_burst=1, admission_tenant_max_in_flight=0)
    clients = Clients(kind, stack.effective_redis_url(), timeout=60)
    try:
        first = clients.call("search", "ретраи", tenant=tenant, groups=["g"], mode="lexical")
        assert [h.doc_id for h in first.hits] == ["a.md"]
        with pytest.raises(RaglineRateLimited) as err:
            clients.call("search", "ретраи", tenant=tenant, groups=["g"], mode="lexical")
        assert err.value.error == "rate limited" and err.value.retry_after_s == 10.0
    finally:
        clients.close()


def test_example_chat_backend_maps_errors_to_statuses(broker):
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import chat_backend
    finally:
        sys.path.pop(0)
    client = RaglineClient(broker.url, timeout=1.0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), chat_backend.make_handler(client, "t-example", ["g"]))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/ask"

    def status() -> tuple[int, dict, str | None]:
        req = urllib.request.Request(url, data=json.dumps({"question": "ретраи"}).encode())
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        return e.value.code, json.load(e.value), e.value.headers.get("Retry-After")

    try:
        code, body, _ = status()  # the query pool is stopped
        assert code == 504 and "in time" in body["error"]
        broker.stop()
        code, body, retry_after = status()
        assert code == 503 and retry_after == "5"
    finally:
        server.shutdown()


@pytest.mark.parametrize("task", ["ragline.query.retrieve", "ragline.query.rerank", "ragline.query.ask"])
@pytest.mark.parametrize("abandoned", ["expired", "revoked"])
def test_an_abandoned_question_leaves_no_result(celery_worker, stack, conn, tenant, task, abandoned):
    """A question nobody waits for any more (its caller revoked it, or its wait ended before a worker
    got to it) is skipped and leaves nothing in Redis; a live question after it is answered."""
    from celery.worker import state as worker_state

    store_docs(conn, tenant, [{"doc_id": "a.md", "content": "Ретраи настраиваются в конфиге."}], dim=384)
    url = stack.effective_redis_url()
    client = RaglineClient(url, timeout=60)
    task_id = f"abandoned-{abandoned}-{task}-{time.time_ns()}"
    payload = {"query": "ретраи", "tenant": tenant, "groups": ["g"], "mode": "lexical"}
    expires = None
    if abandoned == "revoked":
        client.app.control.revoke(task_id)
        deadline = time.monotonic() + 30  # the broadcast reaches the in-process worker's control thread
        while task_id not in worker_state.revoked and time.monotonic() < deadline:
            time.sleep(0.05)
        assert task_id in worker_state.revoked
    else:
        expires = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
    client.app.send_task(task, args=[payload], queue="query", task_id=task_id, expires=expires)
    # the worker's consumer reads the queue in order and skips a revoked or expired message as it
    # receives it: once a question sent after it is answered, the skipped one has been handled
    live = client.search("ретраи", tenant=tenant, groups=["g"], mode="lexical")
    assert [h.doc_id for h in live.hits] == ["a.md"]
    assert not redis.Redis.from_url(url).exists(f"celery-task-meta-{task_id}")
