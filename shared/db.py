"""Per-process PostgreSQL connection pools.

Two pools, each created lazily on first use in the process that uses it: the owner's
(:func:`connection`: ingestion, the control pool, migrations, tools) and the query pool's
(:func:`query_connection`), which connects as a member of the read-only ``ragline_query`` role so
that row-level security (migration 0007) binds every retrieval statement. Celery prefork children
call :func:`reset` from ``worker_process_init`` so that no socket is shared across a fork.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ragline.shared.credentials import secret_file
from ragline.shared.settings import Settings, get_settings

#: the read-only group role of migration 0007, and the login role the embedded stack creates in it
QUERY_ROLE = "ragline_query"
QUERY_LOGIN = "ragline_query_login"

_lock = threading.Lock()
#: pool name -> (pid that created it, pool)
_pools: dict[str, tuple[int, ConnectionPool]] = {}


def _configure(conn: psycopg.Connection) -> None:
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        # the extension does not exist yet (before the first migration)
        pass
    conn.commit()


def query_database_url(settings: Settings) -> str:
    """Where the query pool connects: ``RAGLINE_QUERY_DATABASE_URL``, else the login role the
    embedded stack created (:func:`ensure_query_login`), else the owner's URL, which row-level
    security does not bind (the query pool's warm-up says so)."""
    if settings.services.query_database_url:
        return settings.services.query_database_url
    if settings.embedded_db:
        url = settings.runtime().get("query_database_url")
        if url:
            return url
    return settings.effective_database_url()


def _new_pool(name: str, url: str, settings: Settings) -> ConnectionPool:
    return ConnectionPool(
        url,
        min_size=1,
        max_size=max(4, settings.workers.query_concurrency + 2),
        kwargs={"row_factory": dict_row, "autocommit": False},
        configure=_configure,
        open=True,
        timeout=30,
        check=ConnectionPool.check_connection,
        reconnect_timeout=60,
        name=f"ragline-{name}",
    )


def _get(name: str) -> ConnectionPool:
    with _lock:
        held = _pools.get(name)
        if held is None or held[0] != os.getpid():
            settings = get_settings()
            url = query_database_url(settings) if name == "query" else settings.effective_database_url()
            _pools[name] = (os.getpid(), _new_pool(name, url, settings))
        return _pools[name][1]


def get_pool() -> ConnectionPool:
    """The owner's pool."""
    return _get("owner")


def get_query_pool() -> ConnectionPool:
    """The query pool's (read-only role, row-level security)."""
    return _get("query")


@contextmanager
def connection() -> Iterator[psycopg.Connection]:
    """A pooled owner connection; the transaction commits on success and rolls back on error."""
    with get_pool().connection() as conn:
        yield conn


@contextmanager
def query_connection() -> Iterator[psycopg.Connection]:
    """A pooled connection of the query pool's role: it can only read, and only the rows that the
    transaction's ``ragline.tenant`` / ``ragline.groups`` admit."""
    with get_query_pool().connection() as conn:
        yield conn


def reset() -> None:
    """Drop the pools (after a fork, or when the settings changed)."""
    with _lock:
        for pid, pool in _pools.values():
            if pid == os.getpid():
                pool.close()
        _pools.clear()


def connect(autocommit: bool = True) -> psycopg.Connection:
    """A plain connection outside the pool (migrations, benchmarks' exact baselines)."""
    conn = psycopg.connect(
        get_settings().effective_database_url(), autocommit=autocommit, row_factory=dict_row
    )
    _configure(conn)
    return conn


# -------------------------------------------------------------------------- the query login role
def ensure_query_login(owner_url: str, settings: Settings) -> str:
    """Create (or update) the query pool's login role on the embedded server and return its URL.

    The password is generated once and kept under the ragline home (mode 0600); the returned libpq
    connection string names a password file beside it instead of carrying the password, so it
    can sit in ``runtime.json``. The password is sent already hashed (SCRAM, by libpq), so it
    never appears in a statement the server could log. The group role is created here too (the
    migration grants it its rights), so the login role can join it before the first migration.
    The embedded server's owner is a superuser, which the leakproof mark below needs.
    """
    password = secret_file(settings, "query_db_password").read_text().strip()
    passfile = settings.home_dir / "secrets" / "query_db.pgpass"
    owner = conninfo_to_dict(owner_url)
    dbname = owner.get("dbname", "")
    with psycopg.connect(owner_url, autocommit=True) as conn:
        verifier = conn.pgconn.encrypt_password(password.encode(), QUERY_LOGIN.encode(), b"scram-sha-256")
        exists = conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname IN (%s, %s)", (QUERY_ROLE, QUERY_LOGIN)
        )
        have = {r[0] for r in exists.fetchall()}
        if QUERY_ROLE not in have:
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(QUERY_ROLE)))
        verb = "ALTER" if QUERY_LOGIN in have else "CREATE"
        conn.execute(
            sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE INHERIT PASSWORD {}").format(
                sql.Identifier(QUERY_LOGIN), sql.Literal(verifier.decode())
            )
        )
        conn.execute(
            sql.SQL("GRANT {} TO {}").format(sql.Identifier(QUERY_ROLE), sql.Identifier(QUERY_LOGIN))
        )
        # lets the lexical search use its GIN index under row-level security (migration 0007
        # explains why); a restored dump does not carry the mark, so it is set on every start
        conn.execute("ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF")
    fd = os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        esc = password.replace("\\", "\\\\").replace(":", "\\:")
        f.write(f"*:*:{dbname}:{QUERY_LOGIN}:{esc}\n")
    params = {k: v for k, v in owner.items() if k not in ("user", "password", "passfile")}
    return make_conninfo("", **params, user=QUERY_LOGIN, passfile=str(passfile))
