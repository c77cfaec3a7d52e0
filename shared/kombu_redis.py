"""Reuse one Redis client per kombu channel instead of building one per command.

kombu 5.x's Redis transport wraps every publish, ack and unacked-bookkeeping call in
``Channel.conn_or_acquire()``, which constructs a new ``redis.Redis`` each time. With redis-py 7
that constructor fills a case-insensitive dict of a few hundred response callbacks, which makes it
the largest single cost of the query pool's consumer thread (task events, acks), and every
``send_task`` of a producer pays it too. A ``redis.Redis`` over a connection pool is thread-safe
(each command borrows a pooled connection), so one client per channel and pool is enough: it is
rebuilt when kombu replaces the channel's pool (reconnect after a broker restart).

It patches a private method, so it is applied only in worker processes (``worker_init``, see
``celery_app``), never in a producer that imports the client, and only for the kombu releases it
was written against (:data:`KOMBU_VERSIONS`); elsewhere kombu runs unpatched. The measurement that
justified it is in docs/architecture.md ("Performance notes").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import kombu
from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)

#: kombu releases whose ``Channel.conn_or_acquire`` / ``_create_client`` this was written against
KOMBU_VERSIONS = ((5, 3), (5, 7))


def kombu_supported(version: str) -> bool:
    """Whether ``version`` (e.g. ``"5.7.0"``) is a kombu release the patch was written for."""
    try:
        major_minor = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return KOMBU_VERSIONS[0] <= major_minor <= KOMBU_VERSIONS[1]


def reuse_clients() -> bool:
    """Patch ``kombu.transport.redis.Channel.conn_or_acquire`` once; False if kombu has no such method."""
    if not kombu_supported(kombu.__version__):
        log.info("kombu %s is outside %s: Redis clients are not reused", kombu.__version__, KOMBU_VERSIONS)
        return False
    channel_cls = getattr(kombu_redis, "Channel", None)
    if (
        channel_cls is None
        or not hasattr(channel_cls, "conn_or_acquire")
        or not hasattr(channel_cls, "_create_client")
    ):
        return False
    if getattr(channel_cls.conn_or_acquire, "ragline_reuse", False):
        return True  # already patched

    @contextmanager
    def conn_or_acquire(self, client=None) -> Iterator[object]:
        if client:
            yield client
            return
        pool = self.pool
        cached = self.__dict__.get("_ragline_client")
        if cached is None or cached[0] is not pool:
            cached = (pool, self._create_client())
            self.__dict__["_ragline_client"] = cached
        yield cached[1]

    conn_or_acquire.__doc__ = (
        "One cached client per channel and connection pool (ragline.shared.kombu_redis)."
    )
    conn_or_acquire.ragline_reuse = True
    channel_cls.conn_or_acquire = conn_or_acquire
    return True
