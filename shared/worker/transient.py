"""Infrastructure errors after which a task is retried instead of recording a failure.

redis-py's connection errors are not the builtin ``ConnectionError``: a broker or limiter restart
is transient too. Kept free of provider imports so the ACL-sync path never loads an embedder.
"""

from __future__ import annotations

import psycopg
import redis

INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    ConnectionError,
    TimeoutError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)
