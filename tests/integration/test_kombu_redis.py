"""One Redis client per kombu channel (shared/worker/kombu_redis.py), on the stack's real Redis."""

from __future__ import annotations

import redis


def test_channel_reuses_one_client_and_rebuilds_it_with_a_new_pool(stack, monkeypatch):
    from kombu import Connection

    from ragline.shared.worker.celery_app import app  # importing the app applies the patch
    from ragline.shared.worker.kombu_redis import reuse_clients

    assert reuse_clients()
    built: list[object] = []
    real_init = redis.Redis.__init__

    def counting_init(self, *args, **kwargs):
        built.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counting_init)
    with Connection(app.conf.broker_url) as conn:
        channel = conn.default_channel
        queue = conn.SimpleQueue("ragline-test-kombu-reuse")
        for i in range(5):
            queue.put({"n": i})
        got = [queue.get(timeout=5) for _ in range(5)]
        for message in got:
            message.ack()  # QoS.ack goes through conn_or_acquire as well
        assert [m.payload["n"] for m in got] == list(range(5))
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
        sync_clients = [c for c in built if c.connection_pool is channel.pool]
        assert len(sync_clients) == 1, f"{len(sync_clients)} clients built for 5 puts and 5 acks"
        # kombu drops the pool on reconnect: the next command must not use a client of the old pool
        old_pool = channel.pool
        channel._pool = None
        with channel.conn_or_acquire() as fresh:
            assert fresh.connection_pool is channel.pool is not old_pool
            assert fresh.ping()
        queue.clear()
        queue.close()
