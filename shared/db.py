"""Per-process PostgreSQL connection pool.

The pool is created lazily on first use in the process that uses it. Celery prefork children
call :func:`reset` from ``worker_process_init`` so that no socket is shared across a fork.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ragline.shared.settings import get_settings

_lock = threading.Lock()
_pool: ConnectionPool | None = None
_pool_pid: int | None = None


def _configure(conn: psycopg.Connection) -> None:
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        # the extension does not exist yet (before the first migration)
        pass
    conn.commit()


def get_pool() -> ConnectionPool:
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            settings = get_settings()
            _pool = ConnectionPool(
                settings.effective_database_url(),
                min_size=1,
                max_size=max(4, settings.workers.query_concurrency + 2),
                kwargs={"row_factory": dict_row, "autocommit": False},
                configure=_configure,
                open=True,
                timeout=30,
                check=ConnectionPool.check_connection,
                reconnect_timeout=60,
            )
            _pool_pid = os.getpid()
        return _pool


@contextmanager
def connection() -> Iterator[psycopg.Connection]:
    """A pooled connection; the transaction commits on success and rolls back on error."""
    with get_pool().connection() as conn:
        yield conn


def reset() -> None:
    """Drop the pool (after a fork, or when the settings changed)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is not None and _pool_pid == os.getpid():
            _pool.close()
        _pool = None
        _pool_pid = None


def connect(autocommit: bool = True) -> psycopg.Connection:
    """A plain connection outside the pool (migrations, benchmarks' exact baselines)."""
    conn = psycopg.connect(
        get_settings().effective_database_url(), autocommit=autocommit, row_factory=dict_row
    )
    _configure(conn)
    return conn
