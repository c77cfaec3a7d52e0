"""What a producer's Redis user can make Redis keep, on the real embedded Redis (``services.start_redis``).

* Every producer role × every key its patterns reach but its queue (its results, its answer
  streams, its queue's priority lists) × every command that would create or grow a key there: all
  refused and nothing created, so no never-expiring list under its patterns, and the worker's
  ``XADD`` of an answer stream still works after the attempts. Its queue it may still push onto.
* ``maxmemory`` with ``redis_acl.MAXMEMORY_POLICY``: a producer that fills its queue past the limit
  gets an OOM error, results (with a TTL) are evicted to make room first, and no queued message is
  ever evicted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ragline.shared.config.settings import Settings
from ragline.shared.sdk import redis_acl
from ragline.shared.sdk.names import answer_stream_key
from ragline.shared.stack import services
from tests.integration.test_redis_acl import private_redis

PRODUCERS = {name: role for name, role in redis_acl.ROLES.items() if role.owns_results}
#: each producer's queue (the one key it may create)
QUEUE = {"chat": "query", "relay": "acl"}
#: every way to create or grow a key (the producer holds only LPUSH; the rest must stay refused)
WRITES = {
    "LPUSH": lambda r, k: r.lpush(k, "x" * 64),
    "RPUSH": lambda r, k: r.rpush(k, "x"),
    "LPUSHX": lambda r, k: r.lpushx(k, "x"),
    "SET": lambda r, k: r.set(k, "x"),
    "APPEND": lambda r, k: r.append(k, "x"),
    "INCR": lambda r, k: r.incr(k),
    "HSET": lambda r, k: r.hset(k, "f", "x"),
    "SADD": lambda r, k: r.sadd(k, "x"),
    "ZADD": lambda r, k: r.zadd(k, {"x": 1}),
    "XADD": lambda r, k: r.xadd(k, {"x": "y"}),
    "GETSET": lambda r, k: r.getset(k, "x"),
    "SETRANGE": lambda r, k: r.setrange(k, 0, "x"),
}


def _redis(maxmemory_mb: int = 512) -> Iterator[tuple[Settings, str]]:
    return private_redis(services_redis_maxmemory_mb=maxmemory_mb)


def _client(settings: Settings, base: str, role: str) -> redis.Redis:
    return redis.Redis.from_url(settings.redis_role_url(base, role), socket_timeout=10)


@pytest.fixture(scope="module")
def limited_redis() -> Iterator[tuple[Settings, str]]:
    yield from _redis()


def _keys(role: str) -> dict[str, str]:
    """Keys its patterns reach that are not its queue."""
    return {
        "its result": f"{redis_acl.RESULT_KEY_PREFIX}{role}-victim",
        "its answer stream": answer_stream_key(f"{role}-victim"),
        "its queue's priority list": f"{QUEUE[role]}\x06\x163",
    }


@pytest.mark.parametrize("role", list(PRODUCERS))
def test_a_producer_creates_no_key_but_its_queue(limited_redis, role):
    settings, base = limited_redis
    worker, producer = _client(settings, base, "worker"), _client(settings, base, role)
    created = []
    for where, key in _keys(role).items():
        for command, write in WRITES.items():
            try:
                write(producer, key)
            except redis.exceptions.NoPermissionError:
                pass
            if worker.exists(key):
                created.append((where, command, worker.type(key).decode(), worker.ttl(key)))
                worker.delete(key)
    assert created == []
    # the worker's answer stream for the producer's task is a stream, whatever the producer tried
    stream = _keys(role)["its answer stream"]
    worker.xadd(stream, {"type": "answer", "data": "x"}, maxlen=8, approximate=False)
    assert worker.type(stream) == b"stream"
    worker.delete(stream)
    assert producer.lpush(QUEUE[role], "a message") == 1  # its own queue: as before
    worker.delete(QUEUE[role])


def test_a_full_redis_evicts_results_and_never_a_queued_message():
    """8 MB of memory: 3 MB of results (with their TTL) and an answer stream, then a chat backend
    pushes 64 KB messages until Redis refuses one. Every accepted message is still queued; the
    results and the stream went first."""
    gen = _redis(maxmemory_mb=8)
    settings, base = next(gen)
    try:
        worker, chat = _client(settings, base, "worker"), _client(settings, base, "chat")
        results = [f"{redis_acl.RESULT_KEY_PREFIX}chat-{i}" for i in range(48)]
        for key in results:
            worker.setex(key, 3600, "r" * 65536)
        stream = answer_stream_key("chat-full")
        worker.xadd(stream, {"type": "delta", "data": "s" * 65536})
        worker.expire(stream, 3600)
        pushed, refused = 0, None
        for _ in range(400):  # 25 MB if nothing ever refused one
            try:
                chat.lpush("query", "m" * 65536)
                pushed += 1
            except redis.exceptions.ResponseError as exc:
                refused = str(exc)
                break
        assert refused is not None and "maxmemory" in refused, (pushed, refused)
        assert worker.llen("query") == pushed  # no queued message evicted
        assert pushed * 65536 > 5 * 2**20  # room was made for more than the free memory
        kept = sum(worker.exists(k) for k in results)
        assert kept < len(results) // 4, kept  # the results went
        assert not worker.exists(stream)
    finally:
        gen.close()


def test_every_redis_the_project_starts_has_the_same_limit_policy():
    """The embedded server's command line and the compose file's both name the one policy."""
    argv = services.redis_command(Settings(), Path("/x/redis.conf"), 1)
    assert argv[argv.index("--maxmemory-policy") + 1] == redis_acl.MAXMEMORY_POLICY
    assert argv[argv.index("--maxmemory") + 1] == f"{Settings().services.redis_maxmemory_mb}mb"
    compose = (Path(__file__).resolve().parents[2] / "deploy" / "docker-compose.yml").read_text()
    assert f"--maxmemory-policy {redis_acl.MAXMEMORY_POLICY}" in compose


@pytest.mark.parametrize("role", list(PRODUCERS))
def test_a_producer_still_sends_its_tasks_through_celery(limited_redis, role):
    """The clients' own app (``client_app``), logged in as the producer's user, lands its task on its queue."""
    from ragline.shared.sdk.client import client_app

    settings, base = limited_redis
    url = settings.redis_role_url(base, role)
    app = client_app(url, url, settings)
    task = next(t for t, route in app.conf.task_routes.items() if route["queue"] == QUEUE[role])
    app.send_task(task, args=[{}])
    worker = _client(settings, base, "worker")
    assert worker.llen(QUEUE[role]) == 1
    worker.delete(QUEUE[role])


def test_a_worker_consumes_from_a_full_redis():
    """A chat backend fills an 8 MB Redis: a 2 MB message first, then 1 KB ones until Redis refuses
    one. The first message taken frees its 2 MB and its unacked record takes them back, so from the
    second on Redis is past ``maxmemory`` when the consumer records a message as unacked (``HSET``):
    refused with OOM, which ended the consumer. With ``kombu_redis``'s patches every message is
    delivered, the consumer never raises, and once acknowledged nothing is left in ``unacked``."""
    from kombu import Connection, Consumer, Exchange, Queue

    from ragline.shared.worker.kombu_redis import gate_deliveries, requeue_lost_deliveries
    from tests.chaos.test_attacks_decode_gate import _envelope

    assert requeue_lost_deliveries() and gate_deliveries()
    gen = _redis(maxmemory_mb=8)
    settings, base = next(gen)

    def message(i: int, size: int) -> str:
        return _envelope("query", "t", b'"' + b"x" * size + b'"', "application/json", "utf-8", f"m{i}")

    try:
        chat = _client(settings, base, "chat")
        chat.lpush("query", message(0, 2**21))
        pushed, full = 1, False
        try:
            while pushed < 20_000:
                chat.lpush("query", message(pushed, 1024))
                pushed += 1
        except redis.exceptions.OutOfMemoryError:
            full = True
        got = []
        with Connection(settings.redis_role_url(base, "worker")) as conn:
            queue = Queue("query", Exchange("query", type="direct"), routing_key="query", no_declare=True)
            with Consumer(conn, queues=[queue], callbacks=[lambda body, m: got.append(m)], accept=["json"]):
                for _ in range(20):
                    conn.drain_events(timeout=5)
            recorded = _client(settings, base, "worker").hlen("unacked")
            for m in got:
                m.ack()
        # Redis was full before anything was consumed (how many 1 KB messages fit in 8 MB depends
        # on the allocator), and held more messages than the consumer takes
        assert full and pushed > 20 and len(got) == 20
        assert recorded < 20  # some were taken while Redis refused their unacked record
        assert _client(settings, base, "worker").hlen("unacked") == 0
    finally:
        gen.close()
