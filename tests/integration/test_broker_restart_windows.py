"""What a broker restart may not lose, on the stack's real Redis, each window opened on purpose: a
message kombu took off its queue but could not yet record as unacked, an owner record of a tag
received just before the restart, and messages whose send returned when redis-server crashes."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid

import psutil
import pytest
import redis


def _wait(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_a_delivery_the_broker_loses_before_recording_it_is_requeued(stack, monkeypatch):
    """Redis stops after BRPOP handed the message out and before ``QoS.append`` recorded it: the
    worker's patch puts it back once Redis answers, and a consumer receives it."""
    from kombu import Connection, Consumer, Exchange, Producer, Queue
    from kombu.transport import redis as kombu_redis

    from ragline.shared.stack import services
    from ragline.shared.worker import kombu_redis as patches
    from ragline.shared.worker.celery_app import app

    name = f"ragline-test-lost-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
    real_append = getattr(kombu_redis.QoS.append, "__wrapped__", kombu_redis.QoS.append)
    stopped: list[str] = []

    def broker_goes_away_first(self, message, delivery_tag):
        if not stopped:
            stopped.append(delivery_tag)
            services.stop_redis(stack)
        return real_append(self, message, delivery_tag)

    monkeypatch.setattr(kombu_redis.QoS, "append", broker_goes_away_first)
    patches.requeue_lost_deliveries()  # what every worker applies at worker_init
    got: list[dict] = []
    try:
        with Connection(app.conf.broker_url) as conn:
            Producer(conn).publish(
                {"n": 1}, exchange=queue.exchange, routing_key=name, declare=[queue], serializer="json"
            )
            with Consumer(conn, [queue], callbacks=[lambda body, m: got.append(body)], accept=["json"]):
                with pytest.raises(Exception) as lost:
                    conn.drain_events(timeout=10)
        assert isinstance(lost.value, tuple(conn.connection_errors)), lost.value
        assert stopped and got == []
    finally:
        services.start_redis(stack)
    with Connection(app.conf.broker_url) as conn:

        def ack(body, message):
            got.append(body)
            message.ack()

        with Consumer(conn, [queue], callbacks=[ack], accept=["json"]):
            conn.drain_events(timeout=20)
        conn.default_channel.queue_delete(name)
    assert got == [{"n": 1}]


def test_an_owner_record_redis_refused_is_written_once_it_answers(stack, caplog):
    """A tag received just before the broker stopped keeps its owner record (or it would wait
    ``visibility_timeout`` instead of being restored with its dead connection generation)."""
    from ragline.shared.stack import services
    from ragline.shared.worker import redelivery
    from ragline.shared.worker.celery_app import app

    client = redis.Redis.from_url(app.conf.broker_url)
    tag, owner = f"test-tag-{uuid.uuid4().hex[:8]}", "test-host:1:0.000#1"
    caplog.set_level(logging.DEBUG, logger="ragline.shared.worker.redelivery")
    services.stop_redis(stack)
    writer = threading.Thread(target=redelivery._write_owners, daemon=True)
    writer.start()
    try:
        redelivery._owners.put((tag, owner))
        assert _wait(lambda: "could not record owners" in caplog.text), "the writer never tried"
    finally:
        services.start_redis(stack)
    try:
        assert _wait(lambda: client.hget(redelivery.OWNER_KEY, tag) == owner.encode()), "owner record lost"
    finally:
        redelivery._owners.put(None)
        writer.join(10)
        client.hdel(redelivery.OWNER_KEY, tag)
    assert not writer.is_alive()


def test_a_redis_crash_loses_no_message_whose_send_returned(stack):
    """The stated durability (``RAGLINE_SERVICES_REDIS_APPENDFSYNC``, docs/operations.md): every
    accepted write is in the append-only file before Redis replies, so a SIGKILL of redis-server
    right after the sends loses none of them; only fsync (a machine crash) is once a second."""
    from ragline.shared.stack import services
    from ragline.shared.worker.celery_app import app

    # CONFIG is renamed away on the embedded server and INFO is no ragline user's: the policy is read
    # off the command it runs
    argv = services.redis_command(stack, stack.home_dir / "redis" / "redis.conf", 0)
    assert argv[argv.index("--appendonly") + 1] == "yes"
    assert argv[argv.index("--appendfsync") + 1] == stack.services.redis_appendfsync
    name = f"ragline-test-crash-{uuid.uuid4().hex[:8]}"
    ids = [app.send_task("ragline.test.never_run", args=[{"n": i}], queue=name).id for i in range(50)]
    pid = services.redis_pid(stack)
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs([psutil.Process(pid)], timeout=10)
    services.start_redis(stack)
    client = redis.Redis.from_url(app.conf.broker_url)
    try:
        assert client.llen(name) == len(ids)
    finally:
        client.delete(name)
