"""The HNSW index of the chunks' embeddings (``ragline index status|rebuild|drop|defer|build``, the
bulk loads of ``ragline ingest --bulk`` and the benchmarks): the index of the chunks' embeddings, changing
its storage (``vector`` or ``halfvec``) while the query pool keeps answering, and bulk loads that
build it once after the rows instead of row by row.

Every build and drop is ``CONCURRENTLY``: writers and readers of ``chunks`` are never locked out;
a build only waits for the transactions already running and then takes as long as a plain one
(the session's ``maintenance_work_mem`` should hold the graph, ``--maintenance-work-mem``). A build
that fails or is interrupted leaves an invalid index under the building name, which the next
rebuild drops first. The procedure, and which setting goes with which index, are in
docs/operations.md (Vector index and query planning).

A bulk load (``ragline ingest --bulk``, ``ragline reembed --bulk``, or ``index defer`` … ``index
build`` around any load) opens a *deferral window*: the HNSW indexes are dropped concurrently and
recorded in ``index_deferrals`` (migration 0013), rows are written without graph maintenance, and
the configured kind's index is built once at the end. While the window is open every vector search
is exact: correct, and slower for large tenants (docs/operations.md, Bulk loads).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from ragline.query.retrieval.vector_index import (
    BUILDING,
    INDEX_NAMES,
    definition,
    hnsw_indexes,
    kind_of,
    problem_with,
)
from ragline.shared.config.settings import get_settings


def status_info(conn, kind: str, dim: int) -> dict:
    """The HNSW indexes with the kind each serves, the configured kind, and the mismatch if any."""
    indexes = hnsw_indexes(conn)
    for i in indexes:
        i["kind"] = kind_of(i, dim)
    window = open_deferral(conn)
    problem = problem_with(indexes, kind, dim)
    if window and problem:
        problem = (
            f"the HNSW index is deferred by a bulk load ({window['reason']}, window {window['id']},"
            f" since {window['started_at']:%Y-%m-%d %H:%M:%S %Z}): vector search is exact until"
            " `ragline index build`"
        )
    return {"setting": kind, "dim": dim, "indexes": indexes, "deferral": window, "problem": problem}


def replaced_by(indexes: list[dict], kind: str, dim: int, keep_old: bool) -> list[str]:
    """The indexes a new ``kind`` index replaces (pure): those of the same kind or name, and unless
    ``keep_old`` the other kind's; an HNSW index on anything else is not ours to drop."""
    return [
        i["name"]
        for i in indexes
        if i["name"] == INDEX_NAMES[kind]
        or kind_of(i, dim) == kind
        or (not keep_old and (kind_of(i, dim) is not None or i["name"] in INDEX_NAMES.values()))
    ]


def rebuild_index(
    conn, kind: str, dim: int, keep_old: bool = False, maintenance_work_mem: str | None = None
) -> dict:
    """Build ``kind``'s index concurrently under a building name, drop the replaced indexes
    concurrently (the same kind's always, the other kind's unless ``keep_old``), then give it its
    kind's name. ``conn`` must be in autocommit mode (no ``CONCURRENTLY`` inside a transaction)."""
    before = [i for i in hnsw_indexes(conn) if i["name"] != BUILDING]
    conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {BUILDING}")
    if maintenance_work_mem:
        conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
    t = time.perf_counter()
    conn.execute(definition(kind, dim, BUILDING))
    build_s = round(time.perf_counter() - t, 2)
    replaced = replaced_by(before, kind, dim, keep_old)
    for name in replaced:
        conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    conn.execute(f"ALTER INDEX {BUILDING} RENAME TO {INDEX_NAMES[kind]}")
    return {"built": INDEX_NAMES[kind], "kind": kind, "build_s": build_s, "dropped": replaced}


def drop_index(conn, kind: str, dim: int) -> list[str]:
    """Drop every HNSW index of ``kind`` concurrently; the names dropped."""
    names = [i["name"] for i in hnsw_indexes(conn) if kind_of(i, dim) == kind]
    for name in names:
        conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    return names


#: one opener or builder at a time (a session lock: the window's DDL cannot run in a transaction)
DEFERRAL_LOCK = "ragline.index_deferral"
OPEN_DEFERRAL_SQL = (
    "SELECT id, reason, kind, dropped, started_at FROM index_deferrals WHERE finished_at IS NULL"
)


@contextmanager
def _deferral_lock(conn) -> Iterator[None]:
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (DEFERRAL_LOCK,))
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (DEFERRAL_LOCK,))


def open_deferral(conn) -> dict | None:
    """The open deferral window, or None."""
    row = conn.execute(OPEN_DEFERRAL_SQL).fetchone()
    return dict(row) if row else None


def defer_index(conn, reason: str, kind: str, dim: int) -> dict:
    """Open a deferral window: record every HNSW index of ours, then drop them concurrently.

    An open window is joined, not opened twice (``opened`` False): only its opener builds the
    index at the end. The definitions are recorded before the drops, so a window interrupted
    halfway is still closed by ``build_deferred``. ``conn`` must be in autocommit mode.
    """
    from psycopg.types.json import Jsonb  # start-up: psycopg loads only for commands that use it

    with _deferral_lock(conn):
        current = open_deferral(conn)
        if current:
            return {"opened": False, "id": current["id"], "reason": current["reason"], "dropped": []}
        ours = [
            i
            for i in hnsw_indexes(conn)
            if kind_of(i, dim) is not None or i["name"] in (*INDEX_NAMES.values(), BUILDING)
        ]
        row = conn.execute(
            "INSERT INTO index_deferrals (reason, kind, dropped) VALUES (%s, %s, %s) RETURNING id",
            (reason, kind, Jsonb({i["name"]: i["definition"] for i in ours})),
        ).fetchone()
        for i in ours:
            conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{i["name"]}"')
    return {"opened": True, "id": row["id"], "reason": reason, "dropped": [i["name"] for i in ours]}


def build_deferred(conn, kind: str, dim: int, maintenance_work_mem: str | None = None) -> dict:
    """Close the open deferral window: build ``kind``'s index concurrently (unless a valid one is
    there already) and record how long it took. Without an open window nothing happens."""
    with _deferral_lock(conn):
        current = open_deferral(conn)
        if current is None:
            return {"closed": None, "built": None, "build_s": 0.0}
        have = [i for i in hnsw_indexes(conn) if i["valid"] and kind_of(i, dim) == kind]
        res = (
            {"built": None, "build_s": 0.0, "dropped": []}
            if have
            else rebuild_index(conn, kind, dim, keep_old=True, maintenance_work_mem=maintenance_work_mem)
        )
        conn.execute(
            "UPDATE index_deferrals SET finished_at = now(), build_s = %s WHERE id = %s",
            (res["build_s"], current["id"]),
        )
    return {"closed": current["id"], "reason": current["reason"], **res}


@contextmanager
def bulk_window(
    reason: str,
    connect: Callable[[], AbstractContextManager],
    note: Callable[[str], None],
    maintenance_work_mem: str | None = None,
) -> Iterator[dict]:
    """``ragline ingest --bulk`` and ``reembed --bulk``: the index is dropped before the load and
    built after it, even when the load fails or is interrupted (the table must not stay without an
    index because a command stopped); a window opened by someone else is joined and left open.
    ``connect``: a context manager of an autocommit connection; ``note``: where progress goes."""
    settings = get_settings()
    kind, dim = settings.vector.index, settings.embed.dim
    with connect() as conn:
        window = defer_index(conn, reason, kind, dim)
    note(
        f"bulk load: HNSW index deferred (window {window['id']}, dropped"
        f" {', '.join(window['dropped']) or 'none'})"
        if window["opened"]
        else f"bulk load: joined the open deferral window {window['id']} ({window['reason']}); its opener builds the index"
    )
    try:
        yield window
    finally:
        if window["opened"]:
            note(f"bulk load: building the {kind} HNSW index")
            with connect() as conn:
                built = build_deferred(conn, kind, dim, maintenance_work_mem)
            window["build_s"] = built["build_s"]
            note(f"bulk load: {kind} index built in {built['build_s']:g} s; window {window['id']} closed")
