"""Streaming replicas for the query pool, and read-your-writes for permission changes.

``RAGLINE_SERVICES_QUERY_DATABASE_URL`` may list several servers (:func:`split_urls`); the query pool keeps a
connection pool per server and sends each question to the next one in turn (``shared/worker/db.py``).
Replication is asynchronous, so a replica may still serve a document whose permission was just
revoked, or that was just deleted. The rule that closes that gap: **a permission change (or a
delete) is reported done only when every replica in the rotation has replayed it, or has been taken
out of the rotation** (:func:`wait_for_replay`, called after the commit by the ACL sync, ACL and
delete events, the ACL-only path of ingestion and ``ragline docs delete``). A question that starts
after the report therefore never reads a replica that has not replayed the change.

Out of rotation is one Redis key per replica, ``ragline:replica:out:<name>``, holding the WAL
position (bytes, decimal) the replica must have replayed to come back. Redis because every query
worker already talks to it (it is the broker): reading the marks costs one ``MGET`` per question and
nothing on the primary. The key has no expiry on purpose: only having caught up makes a replica
safe again, and an expiry would put back a replica still serving a revoked document. A mark is only
ever raised (:data:`_RAISE`: a later change can only need a later position) and cleared by
compare-and-delete (:data:`_CLEAR`), so clearing never removes a mark someone raised meanwhile. The
query workers check a marked replica at most every ``RAGLINE_SERVICES_REPLICA_RETRY_S`` and clear its mark
once it has replayed the position (:func:`readmit`); any later wait does the same.

Servers are named ``host:port/dbname`` (:func:`server_name`): the name appears in metric labels,
logs and Redis keys, never a user name or password. Which listed server is the primary is not
configured but asked (``pg_is_in_recovery()``), so a promoted replica needs no change here.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
import redis
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.worker.credentials import mask_text
from ragline.shared.worker.metrics import REPLICA_EXCLUSIONS, REPLICA_READMISSIONS, REPLICA_REPLAY_WAIT_S

log = logging.getLogger(__name__)

MARK_PREFIX = "ragline:replica:out:"
#: the WAL position of a server as bytes (numeric), and whether it is a standby
PRIMARY_LSN_SQL = "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint AS lsn"
REPLAY_SQL = (
    "SELECT pg_is_in_recovery() AS standby, (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint AS replay"
)
# a new target only raises the mark; the values are WAL byte positions (exact as doubles below 2^53)
_RAISE = """
local cur = redis.call('GET', KEYS[1])
if (not cur) or tonumber(cur) < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return redis.call('GET', KEYS[1])
"""
_CLEAR = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_URL_START = re.compile(r",\s*(?=postgres(?:ql)?://)", re.I)


@dataclass(frozen=True)
class Server:
    """One server of the query pool: ``name`` (no credentials) and its libpq URL."""

    name: str
    url: str = field(repr=False)


def split_urls(value: str) -> list[str]:
    """``RAGLINE_SERVICES_QUERY_DATABASE_URL`` as one libpq URL per server (pure).

    Servers are separated by commas, each URL starting with ``postgresql://`` (or ``postgres://``);
    a comma elsewhere stays inside its URL, so libpq's own multi-host form
    (``postgresql://h1,h2/db``, one server to ragline, libpq picks the host) still works. A value
    that is not a URL (``host=... dbname=...``) is one server.
    """
    return [part.strip() for part in _URL_START.split(value.strip()) if part.strip()]


def server_name(url: str) -> str:
    """``host:port/dbname`` of a libpq URL or connection string, never its user or password (pure)."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return mask_text(url.split("@")[-1].split("?")[0])[:120]
    host = info.get("host") or info.get("hostaddr") or "localhost"
    return f"{host}:{info.get('port') or 5432}/{info.get('dbname') or ''}"


def parse_servers(value: str) -> list[Server]:
    """The servers a configured ``RAGLINE_SERVICES_QUERY_DATABASE_URL`` names; two URLs with one name (the
    same server twice) are refused, since their marks and metrics would be one."""
    servers = [Server(server_name(u), u) for u in split_urls(value)]
    names = [s.name for s in servers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"RAGLINE_SERVICES_QUERY_DATABASE_URL names a server twice: {', '.join(dupes)}")
    return servers


def configured_servers(settings: Settings) -> list[Server]:
    """The servers of ``RAGLINE_SERVICES_QUERY_DATABASE_URL``; none when it is unset (the query pool then
    reads the primary, which needs no waiting)."""
    value = settings.services.query_database_url
    return parse_servers(value) if value else []


def order(
    names: list[str],
    kinds: dict[str, str],
    excluded: set[str],
    failed: set[str],
    primary_reads: str,
    start: int,
) -> list[str]:
    """The servers to try for one question, in order (pure).

    ``names`` in configuration order, ``kinds`` name -> ``primary`` / ``replica`` (unknown: not
    connected yet, taken as a replica), ``excluded`` out of rotation (never tried: that is a matter
    of correctness), ``failed`` recently unable to give a connection (tried last: a matter of
    availability), ``start`` the turn (round robin). The primary is tried with the replicas
    (``rotation``), after them (``fallback``) or never (``never``).
    """
    if not names:
        return []
    k = start % len(names)
    turn = [n for n in names[k:] + names[:k] if n not in excluded]
    primaries = [n for n in turn if kinds.get(n) == "primary"]
    readers = [n for n in turn if kinds.get(n) != "primary"]
    if primary_reads == "rotation":
        first = turn
    elif primary_reads == "fallback":
        first = readers + primaries
    else:
        first = readers
    return [n for n in first if n not in failed] + [n for n in first if n in failed]


# ------------------------------------------------------------------------------------ the marks
_clients: dict[tuple[int, str], redis.Redis] = {}
_clients_lock = threading.Lock()


def _redis(settings: Settings) -> redis.Redis:
    url = settings.effective_redis_url()
    key = (os.getpid(), url)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        return client


def marks(names: list[str], settings: Settings | None = None) -> dict[str, int]:
    """The servers among ``names`` that are out of rotation, with the position each must reach."""
    if not names:
        return {}
    values = _redis(settings or get_settings()).mget([MARK_PREFIX + n for n in names])
    return {n: int(v) for n, v in zip(names, values, strict=True) if v is not None}


def exclude(name: str, lsn: int, reason: str, settings: Settings | None = None) -> int:
    """Take ``name`` out of rotation until it has replayed ``lsn`` (or a later mark's position)."""
    client = _redis(settings or get_settings())
    held = int(client.eval(_RAISE, 1, MARK_PREFIX + name, str(lsn)))
    REPLICA_EXCLUSIONS.labels(name, reason).inc()
    return held


def readmit(name: str, mark: int, replay: int | None, settings: Settings | None = None) -> bool:
    """Put ``name`` back when it has replayed its mark (``replay`` None: not a standby, so current).
    Returns whether it came back; a mark raised meanwhile stays."""
    if replay is not None and replay < mark:
        return False
    cleared = bool(_redis(settings or get_settings()).eval(_CLEAR, 1, MARK_PREFIX + name, str(mark)))
    if cleared:
        REPLICA_READMISSIONS.labels(name).inc()
        log.info("replica %s is back in the query pool's rotation (replayed %d)", name, mark)
    return cleared


# ------------------------------------------------------------------------------------- the wait
@dataclass
class ReplicaWait:
    """What :func:`wait_for_replay` found: the primary's position after the commit, how long the
    wait took, the replicas that replayed it, and those out of rotation (``excluded``: taken out by
    this wait or already out)."""

    lsn: int
    waited_s: float
    caught_up: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "lsn": self.lsn,
            "waited_s": round(self.waited_s, 4),
            "caught_up": self.caught_up,
            "excluded": self.excluded,
        }


_probe_conns: dict[tuple[int, str], psycopg.Connection[TupleRow]] = {}
_probe_lock = threading.Lock()


def probe(server: Server, timeout_s: float) -> tuple[bool, int | None]:
    """``(standby, replay position)`` of one server over a kept connection of this process (the
    query pool's role may run both functions); raises ``psycopg.Error`` when it does not answer."""
    key = (os.getpid(), server.name)
    with _probe_lock:
        conn = _probe_conns.get(key)
        try:
            if conn is None or conn.closed:
                conn = _probe_conns[key] = psycopg.connect(
                    server.url, autocommit=True, connect_timeout=max(1, round(timeout_s))
                )
            row = conn.execute(REPLAY_SQL).fetchone()
        except psycopg.Error:
            dropped = _probe_conns.pop(key, None)
            if dropped is not None:
                dropped.close()
            raise
    return bool(row[0]), (int(row[1]) if row[0] and row[1] is not None else None)


def primary_lsn(conn: psycopg.Connection[Any]) -> int:
    """The primary's WAL position now, on the caller's connection after its commit (so at or past
    the commit record: the session commits synchronously). Leaves no transaction open."""
    row = conn.execute(PRIMARY_LSN_SQL).fetchone()
    if not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        conn.commit()
    return int(row["lsn"] if isinstance(row, dict) else row[0])


def wait_for_replay(
    conn: psycopg.Connection[Any], settings: Settings | None = None, what: str = "permission change"
) -> ReplicaWait | None:
    """Read-your-writes: block until every replica in rotation has replayed what ``conn`` committed,
    at most ``RAGLINE_SERVICES_REPLICA_MAX_LAG_S``; a replica that has not (or does not answer) is taken out
    of rotation before this returns. None (and no query at all) when no servers are configured.

    Call it after the commit and before reporting the change done. A replica already out of
    rotation is not waited for; its mark is raised to this change's position. A Redis error
    propagates: without the mark, the change cannot be reported done.
    """
    settings = settings or get_settings()
    servers = configured_servers(settings)
    if not servers:
        return None
    t0 = time.monotonic()
    target = primary_lsn(conn)
    s = settings.services
    deadline = t0 + s.replica_max_lag_s
    marked = marks([x.name for x in servers], settings)
    out = ReplicaWait(lsn=target, waited_s=0.0)
    waiting: dict[str, Server] = {}
    for server in servers:
        if server.name in marked:  # out of rotation: not waited for, but it must now reach target
            try:
                standby, replay = probe(server, s.replica_connect_timeout_s)
            except psycopg.Error:
                standby, replay = True, None
            mark = marked[server.name]
            if (not standby or (replay is not None and replay >= max(mark, target))) and readmit(
                server.name, mark, None, settings
            ):
                out.caught_up.append(server.name)
            else:
                exclude(server.name, target, "lag", settings)
                out.excluded.append(server.name)
        else:
            waiting[server.name] = server
    pause = 0.001
    unreachable: set[str] = set()
    while waiting:
        for name, server in list(waiting.items()):
            try:
                standby, replay = probe(server, s.replica_connect_timeout_s)
            except psycopg.Error as exc:
                unreachable.add(name)
                log.warning("replica %s did not answer the replay check: %s", name, type(exc).__name__)
                continue
            unreachable.discard(name)
            if not standby or (replay is not None and replay >= target):
                out.caught_up.append(name)
                del waiting[name]
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.05)
    for name in waiting:
        reason = "unreachable" if name in unreachable else "lag"
        exclude(name, target, reason, settings)
        out.excluded.append(name)
        log.warning(
            "replica %s had not replayed a %s after %.1fs (RAGLINE_SERVICES_REPLICA_MAX_LAG_S): out of the query"
            " pool's rotation until it has (%s)",
            name,
            what,
            s.replica_max_lag_s,
            reason,
        )
    out.waited_s = time.monotonic() - t0
    REPLICA_REPLAY_WAIT_S.observe(out.waited_s)
    return out
