"""Per-process PostgreSQL connection pools.

Two pools, each created lazily on first use in the process that uses it: the owner's
(:func:`connection`: ingestion, the control pool, migrations, tools) and the query pool's
(:func:`query_connection`), which connects as a member of the read-only ``ragline_query`` role so
that row-level security (migration 0007) binds every retrieval statement. Celery prefork children
call :func:`reset` from ``worker_process_init`` so that no socket is shared across a fork.

When ``RAGLINE_SERVICES_QUERY_DATABASE_URL`` names servers, the query pool is a pool per server and each
connection goes to the next server in turn that is in rotation (``shared/worker/replicas.py`` holds the
rules and the read-your-writes wait of the writers).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.worker import replicas
from ragline.shared.worker.credentials import secret_file
from ragline.shared.worker.metrics import QUERY_SERVER_FALLBACKS

log = logging.getLogger(__name__)

#: the read-only group role of migration 0007, and the login role the embedded stack creates in it
QUERY_ROLE = "ragline_query"
QUERY_LOGIN = "ragline_query_login"

#: what every connection of this module is: its rows are dicts (``row_factory=dict_row``), so a
#: caller reads ``row["column"]``
DictConnection = psycopg.Connection[DictRow]
Pool = ConnectionPool[DictConnection]

_lock = threading.Lock()
#: pool name -> (pid that created it, pool)
_pools: dict[str, tuple[int, Pool]] = {}


def _configure(conn: DictConnection) -> None:
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        # the extension does not exist yet (before the first migration)
        pass
    conn.commit()


def query_database_url(settings: Settings) -> str:
    """Where the query pool connects: ``RAGLINE_SERVICES_QUERY_DATABASE_URL``, else the login role the
    embedded stack created (:func:`ensure_query_login`), else the owner's URL, which row-level
    security does not bind (the query pool's warm-up says so)."""
    if settings.services.query_database_url:
        return settings.services.query_database_url
    if settings.embedded_db:
        url = settings.runtime().get("query_database_url")
        if url:
            return url
    return settings.effective_database_url()


#: tasks this process runs at once: 1 in a prefork child or a solo worker, the pool's concurrency in a
#: threads worker (:func:`set_task_threads`, from ``worker_init``)
_task_threads = 1


def pool_max_size(settings: Settings, task_threads: int | None = None) -> int:
    """Connections a pool may open (on demand; it keeps one): two per task thread, because an
    ingest task holds its transaction's connection while it embeds and checks out a second one for
    the job's bookkeeping (heartbeat, each document's result), plus two for the process's own
    threads (a caller polling a job, a warm-up). Fewer deadlock a threads worker whose every task
    waits for its second connection, until the checkout times out."""
    threads = _task_threads if task_threads is None else task_threads
    return max(4, settings.workers.query_concurrency + 2, 2 * threads + 2)


def set_task_threads(threads: int) -> None:
    """A threads worker runs ``threads`` tasks in this process: size the pools for them (those
    already open grow in place)."""
    global _task_threads
    _task_threads = max(1, threads)
    size = pool_max_size(get_settings())
    with _lock:
        pools = [pool for pid, pool in _pools.values() if pid == os.getpid()]
        if _router is not None and _router[0] == os.getpid() and _router[1] is not None:
            pools += list(_router[1].pools.values())
    for pool in pools:
        if pool.max_size < size:
            pool.resize(pool.min_size, size)


def _new_pool(name: str, url: str, settings: Settings, configure=_configure, timeout: float = 30) -> Pool:
    return ConnectionPool(
        url,
        min_size=1,
        max_size=pool_max_size(settings),
        kwargs={"row_factory": dict_row, "autocommit": False},
        configure=configure,
        open=True,
        timeout=timeout,
        check=ConnectionPool.check_connection,
        reconnect_timeout=60,
        name=f"ragline-{name}",
    )


def _get(name: str) -> Pool:
    with _lock:
        held = _pools.get(name)
        if held is None or held[0] != os.getpid():
            settings = get_settings()
            url = query_database_url(settings) if name == "query" else settings.effective_database_url()
            _pools[name] = (os.getpid(), _new_pool(name, url, settings))
        return _pools[name][1]


class NoQueryServer(psycopg.OperationalError):
    """No server of ``RAGLINE_SERVICES_QUERY_DATABASE_URL`` can answer: all out of rotation or failing."""


class QueryRouter:
    """The query pool over the servers of ``RAGLINE_SERVICES_QUERY_DATABASE_URL``: a pool per server
    (created on first use), round robin over those in rotation (``replicas.order``).

    Per question: one ``MGET`` of the rotation marks in Redis (skipped for servers known to be the
    primary, which never lag). A server whose pool gives no connection within
    ``RAGLINE_SERVICES_REPLICA_CONNECT_TIMEOUT_S`` is tried last for ``RAGLINE_SERVICES_REPLICA_RETRY_S`` (in this
    process). A marked replica is checked at most every ``RAGLINE_SERVICES_REPLICA_RETRY_S`` and put back once
    it has replayed its mark. Redis not answering counts every replica as out (the primary answers
    per ``RAGLINE_SERVICES_QUERY_PRIMARY_READS``): serving a revoked document is worse than a failed question.
    """

    def __init__(self, settings: Settings, servers: list[replicas.Server]) -> None:
        self.settings = settings
        self.servers = {s.name: s for s in servers}
        self.names = [s.name for s in servers]
        self.kinds: dict[str, str] = {}  # name -> "primary" / "replica", learnt on connecting
        self.failed_until: dict[str, float] = {}
        self.checked_at: dict[str, float] = {}
        self.pools: dict[str, Pool] = {}
        self.turn = itertools.count()
        self.lock = threading.Lock()

    def pool(self, name: str) -> Pool:
        with self.lock:
            pool = self.pools.get(name)
            if pool is None:

                def configure(conn: DictConnection, name: str = name) -> None:
                    standby = one(conn.execute("SELECT pg_is_in_recovery() AS r"))["r"]
                    self.kinds[name] = "replica" if standby else "primary"
                    _configure(conn)

                pool = self.pools[name] = _new_pool(
                    f"query-{len(self.pools)}",
                    self.servers[name].url,
                    self.settings,
                    configure=configure,
                    timeout=self.settings.services.replica_connect_timeout_s,
                )
            return pool

    def _marks(self) -> dict[str, int] | None:
        ask = [n for n in self.names if self.kinds.get(n) != "primary"]
        try:
            return replicas.marks(ask, self.settings)
        except Exception as exc:  # noqa: BLE001 - any Redis failure: nothing is known to be current
            log.warning(
                "the replicas' rotation marks are unreadable (%s): reading no replica", type(exc).__name__
            )
            return None

    def _check(self, marked: dict[str, int]) -> None:
        """Put back the marked replicas that have replayed their mark (rate limited per server)."""
        now = time.monotonic()
        for name, mark in list(marked.items()):
            if now - self.checked_at.get(name, float("-inf")) < self.settings.services.replica_retry_s:
                continue
            self.checked_at[name] = now
            try:
                with self.pool(name).connection(
                    timeout=self.settings.services.replica_connect_timeout_s
                ) as conn:
                    row = one(conn.execute(replicas.REPLAY_SQL))
                if replicas.readmit(name, mark, row["replay"] if row["standby"] else None, self.settings):
                    del marked[name]
            except Exception as exc:  # noqa: BLE001 - still out; the next check tries again
                log.info("replica %s is out of rotation and its check failed: %s", name, type(exc).__name__)

    def _learn_kinds(self) -> None:
        """Connect to every server whose kind is not known yet (once per process and server, unless
        it fails), so that the primary is never taken for a replica."""
        now = time.monotonic()
        for name in self.names:
            if name in self.kinds or self.failed_until.get(name, 0.0) > now:
                continue
            try:
                with self.pool(name).connection(timeout=self.settings.services.replica_connect_timeout_s):
                    pass  # the pool's configure records the kind
            except (PoolTimeout, psycopg.OperationalError) as exc:
                self.failed_until[name] = time.monotonic() + self.settings.services.replica_retry_s
                log.warning("query server %s gave no connection (%s)", name, type(exc).__name__)

    def candidates(self) -> list[str]:
        if len(self.kinds) < len(self.names):
            self._learn_kinds()
        marked = self._marks()
        if marked is None:
            excluded = {n for n in self.names if self.kinds.get(n) != "primary"}
        else:
            if marked:
                self._check(marked)
            excluded = set(marked)
        now = time.monotonic()
        failed = {n for n, until in self.failed_until.items() if until > now}
        return replicas.order(
            self.names,
            self.kinds,
            excluded,
            failed,
            self.settings.services.query_primary_reads,
            next(self.turn),
        )

    @contextmanager
    def connection(self) -> Iterator[DictConnection]:
        order = self.candidates()
        for i, name in enumerate(order):
            pool = self.pool(name)
            try:
                conn = pool.getconn(timeout=self.settings.services.replica_connect_timeout_s)
            except (PoolTimeout, psycopg.OperationalError) as exc:
                self.failed_until[name] = time.monotonic() + self.settings.services.replica_retry_s
                log.warning(
                    "query server %s gave no connection (%s): trying the next", name, type(exc).__name__
                )
                continue
            if i:
                QUERY_SERVER_FALLBACKS.labels("failed").inc()
            if self.kinds.get(name) == "primary" and any(self.kinds.get(n) != "primary" for n in self.names):
                if self.settings.services.query_primary_reads == "fallback":
                    QUERY_SERVER_FALLBACKS.labels("primary").inc()
            try:
                with conn:
                    yield conn
            finally:
                pool.putconn(conn)
            return
        raise NoQueryServer(
            f"no query server can answer: {len(self.names)} configured, {len(order)} in rotation"
            " (RAGLINE_SERVICES_QUERY_DATABASE_URL; replicas behind a permission change are out until they replay it)"
        )

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()


#: (pid that decided, the router or None) — None: RAGLINE_SERVICES_QUERY_DATABASE_URL is unset
_router: tuple[int, QueryRouter | None] | None = None


def query_router() -> QueryRouter | None:
    """The query pool's router in this process, or None when ``RAGLINE_SERVICES_QUERY_DATABASE_URL`` is
    unset (one pool on the primary, as before)."""
    global _router
    with _lock:
        if _router is None or _router[0] != os.getpid():
            servers = replicas.configured_servers(get_settings())
            _router = (os.getpid(), QueryRouter(get_settings(), servers) if servers else None)
        return _router[1]


def get_pool() -> Pool:
    """The owner's pool."""
    return _get("owner")


def get_query_pool() -> Pool:
    """The query pool's (read-only role, row-level security)."""
    return _get("query")


def one(cursor: psycopg.Cursor[DictRow]) -> DictRow:
    """The row of a statement that always returns one (an aggregate, ``INSERT ... RETURNING``, a
    function call): none is a broken statement, raised here instead of passed on as None."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("the statement returned no row")
    return row


@contextmanager
def connection() -> Iterator[DictConnection]:
    """A pooled owner connection; the transaction commits on success and rolls back on error."""
    with get_pool().connection() as conn:
        yield conn


@contextmanager
def query_connection() -> Iterator[DictConnection]:
    """A pooled connection of the query pool's role: it can only read, and only the rows that the
    transaction's ``ragline.tenant`` / ``ragline.groups`` admit. With several servers configured,
    from the next one in rotation (:class:`QueryRouter`)."""
    router = query_router()
    if router is None:
        with get_query_pool().connection() as conn:
            yield conn
        return
    with router.connection() as conn:
        yield conn


def reset() -> None:
    """Drop the pools (after a fork, or when the settings changed)."""
    global _router
    with _lock:
        for pid, pool in _pools.values():
            if pid == os.getpid():
                pool.close()
        _pools.clear()
        if _router is not None and _router[0] == os.getpid() and _router[1] is not None:
            _router[1].close()
        _router = None


def connect(autocommit: bool = True) -> DictConnection:
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
