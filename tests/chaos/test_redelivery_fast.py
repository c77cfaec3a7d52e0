"""Reduced chaos checks that run inside ``make test`` (not marked ``chaos``): the orphan restore of
``shared/worker/redelivery.py`` against the real embedded Redis and kombu's own unacked bookkeeping."""

from __future__ import annotations

import time
import uuid

import pytest
from kombu import Exchange, Queue


@pytest.fixture()
def redis_client(stack):
    import redis

    client = redis.Redis.from_url(stack.effective_redis_url())
    yield client
    client.close()


def _hold_unacked(app, queue_name: str) -> tuple[Queue, str, object]:
    """Publish one message and fetch it without acknowledging: kombu parks it in ``unacked``."""
    queue = Queue(queue_name, Exchange(queue_name, type="direct"), routing_key=queue_name)
    conn = app.connection_for_write()
    with conn.Producer() as producer:
        producer.publish(
            {"n": 1}, exchange=queue.exchange, routing_key=queue_name, declare=[queue], serializer="json"
        )
    consumer_conn = app.connection_for_read()
    channel = consumer_conn.channel()
    bound = queue(channel)
    deadline = time.monotonic() + 5
    msg = None
    while msg is None and time.monotonic() < deadline:
        msg = bound.get(no_ack=False)
    assert msg is not None
    conn.release()
    return queue, msg.delivery_tag, consumer_conn


def test_tag_of_dead_incarnation_is_restored_and_live_one_kept(stack, redis_client):
    from ragline.shared.worker import redelivery
    from ragline.shared.worker.celery_app import app

    q_dead, tag_dead, c1 = _hold_unacked(app, f"rd-dead-{uuid.uuid4().hex[:6]}")
    q_live, tag_live, c2 = _hold_unacked(app, f"rd-live-{uuid.uuid4().hex[:6]}")
    try:
        assert redis_client.hexists("unacked", tag_dead) and redis_client.llen(q_dead.name) == 0
        acked = [f"acked-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]  # owner records of finished tasks
        redis_client.hset(
            redelivery.OWNER_KEY,
            mapping={tag_dead: "host:1:dead", tag_live: "host:2:live", **{t: "host:2:live" for t in acked}},
        )
        redis_client.set(redelivery.ALIVE_PREFIX + "host:2:live", "1", ex=30)
        redis_client.delete(redelivery.LOCK_KEY)
        restored = redelivery.restore_orphans(redis_client)
        assert tag_dead in restored and tag_live not in restored
        assert redis_client.llen(q_dead.name) == 1  # back in its queue, ready for any worker
        assert not redis_client.hexists("unacked", tag_dead)
        assert redis_client.hexists("unacked", tag_live) and redis_client.llen(q_live.name) == 0
        assert not redis_client.hexists(redelivery.OWNER_KEY, tag_dead)
        assert not any(
            redis_client.hexists(redelivery.OWNER_KEY, t) for t in acked
        )  # forgotten, not restored
        assert redis_client.hexists(redelivery.OWNER_KEY, tag_live)
        # a second restorer in the same tick does nothing (lock), and nothing is restored twice
        assert redelivery.restore_orphans(redis_client) == []
        redis_client.delete(redelivery.LOCK_KEY)
        assert redelivery.restore_orphans(redis_client) == []
        assert redis_client.llen(q_dead.name) == 1
    finally:
        redis_client.hdel(redelivery.OWNER_KEY, tag_dead, tag_live)
        redis_client.delete(redelivery.ALIVE_PREFIX + "host:2:live", q_dead.name, q_live.name)
        for c in (c1, c2):
            c.release()


def test_worker_without_restorer_records_no_owner(celery_worker, redis_client, tenant):
    """The embedded test worker (no ``worker_ready``, so no heartbeat) must not register owners: a tag
    owned by an incarnation that never heartbeats would be "restored" while it runs, and run twice."""
    from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT
    from ragline.shared.worker import redelivery
    from ragline.shared.worker.celery_app import app

    before = set(redis_client.hkeys(redelivery.OWNER_KEY))
    res = app.send_task(TASK_INGEST_DOCUMENT, args=[{"tenant": tenant, "doc_id": "x"}]).get(timeout=60)
    assert res["ok"] is False  # invalid payload (no source): a structured error, not a crash
    assert set(redis_client.hkeys(redelivery.OWNER_KEY)) == before
    assert redelivery._state["thread"] is None
