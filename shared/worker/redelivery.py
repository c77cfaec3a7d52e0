"""Bring back, within seconds, the tasks held by a worker that died (kombu's Redis transport).

With ``acks_late`` a task stays in kombu's ``unacked`` hash until it is acknowledged. Two ways
it comes back after a crash:

* only a prefork **child** dies (SIGKILL, OOM in the child): the pool parent sees
  ``WorkerLostError`` and, with ``task_reject_on_worker_lost``, requeues the message at once;
* the **whole worker** dies (node lost, SIGKILL of the parent): nobody rejects the message.
  kombu's ``restore_visible`` then restores it only once it is older than ``visibility_timeout``
  (an hour here, and it must stay above the longest task, or a long task would run twice);
  ``unacked_restore_interval``/``throttle`` only set how often that check runs.

For the second case every worker records which of its incarnations (host, pid, start time, and
broker-connection generation) holds each delivery tag, and refreshes a short-lived "alive" key.
The connection generation covers a third case: the broker restarts, the worker reconnects, and the
tags delivered on the dead connection can no longer be acknowledged or rejected. A daemon thread in each worker
main process restores the tags whose owner's key has expired, under a Redis lock so one worker
does it per tick. A tag taken by a worker that died before ``task_received`` fired (a window of
milliseconds: owners are written by a thread of their own, off the task's path) falls back to
``visibility_timeout``. Restoring twice is harmless: kombu restores a
tag inside a WATCH transaction and ingestion is idempotent.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time

import redis
from celery import signals

from ragline.shared.config.settings import get_settings

log = logging.getLogger(__name__)

OWNER_KEY = "ragline:unacked_owner"  # hash: delivery tag -> incarnation
ATTEMPTS_PREFIX = "ragline:deliveries:"  # per task id: how many times a worker started it
ALIVE_PREFIX = "ragline:worker_alive:"
LOCK_KEY = "ragline:orphan_restore_lock"

_state: dict = {"incarnation": None, "stop": None, "thread": None, "consumer": None, "app": None}
_gen_lock = threading.Lock()
_owners: queue.SimpleQueue = queue.SimpleQueue()  # (delivery tag, owner) for the owner-writer thread
_gen: dict = {"conn": None, "n": 0}


def incarnation() -> str:
    if _state["incarnation"] is None:
        _state["incarnation"] = f"{socket.gethostname()}:{os.getpid()}:{time.time():.3f}"
    return _state["incarnation"]


def install(app) -> None:
    """Serve ``app``'s workers: the Celery app module calls this once; the signal handlers below act
    only in a process whose app was installed."""
    _state["app"] = app


def _app():
    if _state["app"] is None:
        raise RuntimeError("redelivery.install(app) was not called")
    return _state["app"]


def _redis():
    return redis.Redis.from_url(_app().conf.broker_url, socket_timeout=5, socket_connect_timeout=5)


def _uses_redis() -> bool:
    return _state["app"] is not None and str(_app().conf.broker_url).startswith(
        ("redis://", "rediss://", "redis+socket://")
    )


def owner_id(consumer=None) -> str:
    """This incarnation plus the generation of its broker connection.

    After the broker restarts, the consumer reconnects with a new connection object: tags delivered
    on the old one can no longer be acknowledged and would wait ``visibility_timeout``, so the old
    generation stops heartbeating and its tags are restored like a dead worker's.
    """
    consumer = consumer or _state["consumer"]
    with _gen_lock:
        conn = getattr(consumer, "connection", None)
        if conn is not _gen["conn"]:
            _gen["conn"] = conn  # a strong reference: the id of a freed object could come back
            _gen["n"] += 1
        return f"{incarnation()}#{_gen['n']}"


def heartbeat(client, ttl: float) -> None:
    client.set(ALIVE_PREFIX + owner_id(), "1", px=int(ttl * 1000))


def restore_orphans(client) -> list[str]:
    """Restore unacked messages whose owning worker incarnation is no longer alive; return their tags."""
    if not client.set(
        LOCK_KEY,
        incarnation(),
        nx=True,
        px=int(max(1.0, get_settings().workers.unacked_restore_interval_s) * 1000),
    ):
        return []
    owners = {k.decode(): v.decode() for k, v in client.hgetall(OWNER_KEY).items()}
    if not owners:
        return []
    restored: list[str] = []
    with _app().connection_for_write() as conn:
        channel = conn.default_channel
        unacked = {t.decode() for t in client.hkeys(channel.unacked_key)}
        # acknowledged (or already restored) tags are forgotten in one HDEL: the query pool adds an
        # owner record per question, a hundred or more per tick: one round trip each would add up
        done = [tag for tag in owners if tag not in unacked]
        held = {tag: owner for tag, owner in owners.items() if tag in unacked}
        owner_names = sorted(set(held.values()))
        pipe = client.pipeline(transaction=False)
        for owner in owner_names:
            pipe.exists(ALIVE_PREFIX + owner)
        alive = dict(zip(owner_names, (bool(x) for x in pipe.execute()), strict=True)) if owner_names else {}
        for tag, owner in held.items():
            if not alive[owner]:
                channel.qos.restore_by_tag(tag, leftmost=True)
                done.append(tag)
                restored.append(tag)
        for i in range(0, len(done), 1000):
            client.hdel(OWNER_KEY, *done[i : i + 1000])
    if restored:
        log.warning("restored %d task(s) held by dead workers", len(restored), extra={"tags": restored})
    return restored


def _loop(stop: threading.Event) -> None:
    settings = get_settings()
    ttl = settings.workers.alive_ttl_s
    interval = max(0.5, min(settings.workers.unacked_restore_interval_s, ttl / 3))
    client = None
    while not stop.is_set():
        try:
            client = client or _redis()
            heartbeat(client, ttl)
            restore_orphans(client)
        except Exception as exc:  # broker down or restarting: try again next tick
            log.debug("orphan restore tick failed: %s", type(exc).__name__)
            client = None
        stop.wait(interval)


def start(consumer=None) -> None:
    if _state["thread"] is not None or not _uses_redis():
        return
    _state["consumer"] = consumer
    try:  # alive before the first task is received, so its tag is never taken for an orphan
        heartbeat(_redis(), get_settings().workers.alive_ttl_s)
    except Exception:
        pass
    stop = threading.Event()
    thread = threading.Thread(target=_loop, args=(stop,), name="ragline-orphan-restore", daemon=True)
    writer = threading.Thread(target=_write_owners, name="ragline-owner-writer", daemon=True)
    _state.update(stop=stop, thread=thread)
    thread.start()
    writer.start()


def _write_owners() -> None:
    """Record delivery-tag owners off the consumer's path: a synchronous HSET per received task would
    sit on every question's round trip. Waits for the next tag, then writes every tag queued
    meanwhile in one round trip. A batch Redis refuses is kept and retried with what arrives next:
    dropped, a tag received just before a broker restart would have no owner, and would wait
    ``visibility_timeout`` instead of being restored once its connection generation is dead."""
    client = None
    pending: dict[str, str] = {}
    stopping = False
    while True:
        try:
            items = [_owners.get(timeout=0.5 if pending else None)]
        except queue.Empty:
            items = []
        while True:
            try:
                items.append(_owners.get_nowait())
            except queue.Empty:
                break
        for item in items:
            if item is None:
                stopping = True
            else:
                pending[item[0]] = item[1]
        if pending:
            try:
                client = client or _redis()
                client.hset(OWNER_KEY, mapping=pending)
                pending = {}
            except Exception as exc:  # never fail a task over bookkeeping: kept for the next try
                log.debug("could not record owners of %d tag(s) yet: %s", len(pending), type(exc).__name__)
                client = None
        if stopping:
            return


def stop() -> None:
    if _state["thread"] is None:
        return
    _state["stop"].set()
    _state["thread"].join(5)
    _owners.put(None)
    try:
        client = _redis()
        client.delete(ALIVE_PREFIX + owner_id())
    except Exception:
        pass
    _state.update(stop=None, thread=None, incarnation=None, consumer=None)


@signals.task_received.connect
def _remember_owner(sender=None, request=None, **_: object) -> None:
    """In the worker main process: this incarnation now holds the message's delivery tag."""
    # every task, not only acks_late ones: a prefetched task not yet started (so not yet acknowledged)
    # is dropped from memory when the broker connection dies, and only a restore brings it back
    if request is None or _state["thread"] is None:
        return  # no restorer heartbeats for this process (e.g. an embedded test worker): record nothing,
        # or its live tasks would look orphaned to every other worker
    tag = getattr(request.message, "delivery_tag", None)
    if not tag:
        return
    _owners.put((tag, owner_id(sender)))  # written by the owner-writer thread within milliseconds


_client: dict = {}


def _redis_cached():
    if "c" not in _client:
        _client["c"] = _redis()
    return _client["c"]


@signals.worker_ready.connect
def _on_worker_ready(sender=None, **_: object) -> None:
    """Sent by ``celery worker`` once its pool is up: prefork children are forked before the thread exists."""
    start(sender)


@signals.worker_shutdown.connect
def _on_worker_shutdown(**_: object) -> None:
    stop()


def worker_lost_count(task_id: str | None, retries: int) -> int:
    """How many earlier deliveries of this task died with their worker (counted in Redis per task id).

    Celery's ``reject_on_worker_lost`` requeues without counting, so a document that kills its worker
    child (OOM, a crashing parser) would be redelivered forever; the task fails it after a few.
    Explicit retries reuse the task id and are subtracted. Without Redis the count is 0.
    """
    if not task_id:
        return 0
    try:
        client = _redis_cached()
        key = ATTEMPTS_PREFIX + task_id
        n = client.incr(key)
        client.expire(key, 7 * 24 * 3600)
    except Exception:
        _client.pop("c", None)
        return 0
    return max(0, int(n) - 1 - retries)
