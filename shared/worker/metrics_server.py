"""Per-pool Prometheus endpoint over prometheus-client's multiprocess mode.

Prefork children each write their samples to files in the pool's ``PROMETHEUS_MULTIPROC_DIR``
(``<home>/metrics/<pool>``, set by ``ragline up``); this small process aggregates them and serves
``/metrics`` on 127.0.0.1 at ``metrics_port + pool index``, behind HTTP basic auth (the password is
``RAGLINE_OPS_METRICS_PASSWORD`` or the one generated into the home, ``shared/worker/credentials.py``; on an
address beyond loopback an empty or well-known one is refused). It runs beside the pool
(``metrics-<pool>`` in ``shared/stack/processes.py``), so it outlives a SIGKILLed worker.

Run: ``python -m ragline.shared.worker.metrics_server <pool>``.
"""

from __future__ import annotations

import base64
import hmac
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast
from wsgiref.simple_server import make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.sdk.names import POOLS
from ragline.shared.worker import credentials
from ragline.shared.worker.metrics import QUEUE_DEPTH, ROWS_AWAITING_VECTORS


def metrics_dir(settings: Settings, pool: str) -> Path:
    return settings.home_dir / "metrics" / pool


def metrics_port(settings: Settings, pool: str) -> int:
    return settings.ops.metrics_port + list(POOLS).index(pool)


def reset_dir(path: Path) -> None:
    """A fresh directory per ``ragline up``: stale files of dead processes would be summed in."""
    shutil.rmtree(path, ignore_errors=True)
    credentials.private_dir(path)


def registry_for(path: Path) -> CollectorRegistry:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    return registry


def pool_registry(settings: Settings, pool: str, extra: Iterable[Collector] = ()) -> CollectorRegistry:
    """The pool's files, and ``extra`` collectors of the layer that runs this endpoint (the embedded
    stack adds its supervisor's restarts: ``shared/stack/metrics_endpoint.py``)."""
    registry = registry_for(metrics_dir(settings, pool))
    for collector in extra:
        registry.register(collector)
    return registry


def queue_depths(queues: Iterable[str], redis_url: str) -> dict[str, int]:
    """Messages waiting per Celery queue (kombu keeps each Redis queue in a list named after it)."""
    import redis  # start-up: redis-py; `ragline worker` imports this module

    client = redis.Redis.from_url(redis_url, socket_timeout=2)
    try:
        return {q: int(cast(int, client.llen(q))) for q in queues}  # a sync client: an int
    finally:
        client.close()


def refresh_queue_depth(pool: str, settings: Settings) -> None:
    try:
        depths = queue_depths(POOLS[pool], settings.effective_redis_url())
    except Exception:  # broker down: keep the last value, the endpoint stays up
        return
    for queue, depth in depths.items():
        QUEUE_DEPTH.labels(queue=queue).set(depth)


_awaiting_tenants: set[str] = set()


def refresh_awaiting_vectors(settings: Settings) -> None:
    """``rag_rows_awaiting_vectors{tenant}`` from the database (the rows :mod:`pending_vectors`
    counts); a tenant whose rows all got their vectors drops to 0. Database down: the last values."""
    import psycopg  # start-up: only the ingest pool's endpoint reads the database
    from psycopg.rows import dict_row

    from ragline.shared.worker import pending_vectors

    try:
        with psycopg.connect(
            settings.effective_database_url(), connect_timeout=2, autocommit=True, row_factory=dict_row
        ) as conn:
            awaiting = pending_vectors.counts_by_tenant(conn)["awaiting"]
    except Exception:
        return
    for tenant in _awaiting_tenants | set(awaiting):
        ROWS_AWAITING_VECTORS.labels(tenant=tenant).set(awaiting.get(tenant, 0))
    _awaiting_tenants.update(awaiting)


def basic_auth(app: Callable, user: str, password: str) -> Callable:
    """WSGI middleware: 401 unless the request carries the right basic-auth credentials."""
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def wrapped(environ, start_response):
        if not hmac.compare_digest(environ.get("HTTP_AUTHORIZATION", ""), expected):
            start_response(
                "401 Unauthorized",
                [("WWW-Authenticate", 'Basic realm="ragline metrics"'), ("Content-Type", "text/plain")],
            )
            return [b"authentication required\n"]
        return app(environ, start_response)

    return wrapped


def make_app(pool: str, settings: Settings, extra: Iterable[Collector] = ()) -> Callable:
    registry = pool_registry(settings, pool, extra)
    inner = make_wsgi_app(registry)

    def app(environ, start_response):
        refresh_queue_depth(pool, settings)
        if pool == "ingest":
            refresh_awaiting_vectors(settings)
        return inner(environ, start_response)

    return basic_auth(app, settings.ops.metrics_user, credentials.password(settings, "metrics") or "")


def serve(pool: str, settings: Settings | None = None, block: bool = True, extra: Iterable[Collector] = ()):
    """Serve the pool's aggregated metrics; returns the server when ``block`` is false."""
    settings = settings or get_settings()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") != str(metrics_dir(settings, pool)):
        raise RuntimeError("PROMETHEUS_MULTIPROC_DIR must point at the pool's metrics directory")
    credentials.check_exposure(
        f"the {pool} metrics endpoint",
        settings.ops.metrics_host,
        settings.ops.metrics_user,
        credentials.password(settings, "metrics"),
    )
    httpd = make_server(
        settings.ops.metrics_host,
        metrics_port(settings, pool),
        make_app(pool, settings, extra),
        ThreadingWSGIServer,
        handler_class=_SilentHandler,
    )
    if not block:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd
    httpd.serve_forever()
    return None


def snapshot_text(
    settings: Settings,
    pools: Iterable[str] | None = None,
    extra: Callable[[str], Iterable[Collector]] = lambda pool: (),
) -> dict[str, bytes]:
    """Prometheus text of each pool, read straight from its metrics files (no HTTP needed);
    ``extra(pool)`` as in :func:`pool_registry`."""
    out = {}
    for pool in pools or POOLS:
        path = metrics_dir(settings, pool)
        if path.is_dir():
            out[pool] = generate_latest(pool_registry(settings, pool, extra(pool)))
    return out


def main(
    argv: list[str] | None = None, extra: Callable[[str], Iterable[Collector]] = lambda pool: ()
) -> None:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1 or args[0] not in POOLS:
        raise SystemExit(f"usage: python -m ragline.shared.worker.metrics_server {{{','.join(POOLS)}}}")
    from ragline.shared.worker.logging_setup import (
        configure,  # start-up: structlog; the CLI imports this module
    )

    configure()
    try:
        serve(args[0], extra=extra(args[0]))
    except credentials.InsecureSecretError as exc:
        raise SystemExit(f"ragline metrics server: {exc}") from None


if __name__ == "__main__":
    main()
