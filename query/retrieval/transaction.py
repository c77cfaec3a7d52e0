"""The transaction every search runs in: read-only, scoped to the caller, with a statement timeout.

All statements of one search run in one read-only transaction (:func:`read_only_transaction`) that
first sets, for that transaction only and in one round trip (:func:`set_transaction_params`):

* ``ragline.tenant`` and ``ragline.groups``, which the row-level security policies of migration
  0007 read: on the query pool's role a statement that forgot its tenant or ACL filter still sees
  only the caller's rows (the ``WHERE`` filters stay, because they are what the indexes use);
* ``statement_timeout``: ``RAGLINE_DEADLINES_STATEMENT_TIMEOUT_MS``, or the time left of the
  question when that is shorter; a cancelled statement becomes :class:`RetrievalTimeout` or
  :class:`QuestionDeadlineExceeded`, never a generic database error;
* for a vector search, the HNSW search parameters and two counts the query role reads under
  row-level security too: the tenant's chunks (migration 0009) and the chunks the caller's groups
  admit (migration 0017). :func:`vector_path` picks from them how the vector list is found: an
  exact sort of the tenant's rows, an exact sort of the rows of the documents the caller sees, or
  the HNSW index with iterative scans.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress

import psycopg

from ragline.query import deadline
from ragline.query.deadline import QuestionDeadlineExceeded, RetrievalTimeout
from ragline.query.retrieval import sql
from ragline.query.retrieval.sql import VectorPath
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker.db import DictConnection, one


def vector_path(settings: Settings, tenant_rows: int | None, visible_rows: int | None) -> VectorPath:
    """How a vector search finds its candidates, from the tenant's chunks and the chunks the
    caller's groups admit (pure; the one place every search path takes this decision).

    * ``tenant``: the tenant holds at most ``exact_search_max_rows`` chunks; its rows, read through
      the tenant index, sorted by distance (exact).
    * ``visible``: the tenant is larger but the caller sees at most that many; the rows of the
      documents its groups admit, found through the ACL index of ``documents``, sorted (exact).
    * ``hnsw``: the caller sees more; the HNSW index with iterative scans (approximate).

    Filtered HNSW slows down and loses recall as the share of the index the filter keeps shrinks:
    even with iterative scans it stops at ``hnsw.max_scan_tuples`` with a partial list, and the
    planner, which estimates a tenant's share but not the caller's, walks a large tenant's rows
    instead. An exact sort costs about the same per row whichever index found the rows, so its
    cost follows the rows it sorts; the tenant index comes first because it reads no other table.
    ``visible_rows`` sums the caller's groups' counts: an upper bound when they overlap."""
    limit = settings.vector.exact_search_max_rows
    if limit <= 0:
        return "hnsw"
    if tenant_rows is not None and tenant_rows <= limit:
        return "tenant"
    if visible_rows is not None and visible_rows <= limit:
        return "visible"
    return "hnsw"


@contextmanager
def read_only_transaction(conn: DictConnection) -> Iterator[None]:
    """A read-only transaction whose mode travels with BEGIN (one round trip less than
    ``SET TRANSACTION READ ONLY``); the connection must be idle."""
    conn.read_only = True
    try:
        with conn.transaction():
            yield
    finally:
        with suppress(psycopg.Error):  # a broken connection is discarded by the pool anyway
            conn.read_only = None


class StatementLimit:
    """The ``statement_timeout`` in force in a retrieval transaction, and whether the question's
    deadline (rather than the setting) set it."""

    def __init__(self, settings: Settings) -> None:
        self.limit_ms = settings.deadlines.statement_timeout_ms
        self.timeout_ms, self.by_deadline = deadline.statement_timeout_ms(self.limit_ms)
        # the tenant's chunks and the caller's, read by set_transaction_params for a vector search
        self.tenant_rows: int | None = None
        self.visible_rows: int | None = None

    def vector_path(self, settings: Settings) -> VectorPath:
        """The vector search's path (:func:`vector_path`) from the counts this transaction read."""
        return vector_path(settings, self.tenant_rows, self.visible_rows)

    def tighten(self, conn: DictConnection, stage: str) -> None:
        """Before a further statement: stop when the question has no time left, and lower the
        timeout when the deadline is now nearer than it (a round trip only near the deadline)."""
        deadline.check(stage)
        timeout_ms, by_deadline = deadline.statement_timeout_ms(self.limit_ms)
        if by_deadline and timeout_ms < self.timeout_ms:
            conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(timeout_ms),))
            self.timeout_ms, self.by_deadline = timeout_ms, True

    def error(self, stage: str) -> Exception:
        if self.by_deadline:
            return QuestionDeadlineExceeded(
                f"the question's deadline passed during {stage}", stage=stage, timeout_ms=self.timeout_ms
            )
        return RetrievalTimeout(
            f"{stage} ran past the retrieval statement timeout of {self.timeout_ms} ms",
            stage=stage,
            timeout_ms=self.timeout_ms,
        )


def set_transaction_params(
    conn: DictConnection,
    req: SearchRequest,
    settings: Settings,
    n: int | None = None,
    limit: StatementLimit | None = None,
) -> StatementLimit:
    """The caller's scope for row-level security, the statement timeout and (with ``n``, for a
    vector search) the HNSW parameters, local to the current transaction, in one round trip; for a
    vector search with the exact paths on, that round trip also reads the tenant's number of chunks
    and the caller's into the returned limit's ``tenant_rows`` and ``visible_rows``."""
    limit = limit or StatementLimit(settings)
    params = {"tenant": req.tenant, "groups": req.groups, "timeout": str(limit.timeout_ms)}
    statement = sql.SCOPE_SQL
    count = n is not None and settings.vector.exact_search_max_rows > 0
    if n is not None:
        statement += sql.HNSW_SQL + (sql.TENANT_ROWS_SQL if count else "")
        params["ef_search"] = str(int(max(settings.vector.hnsw_ef_search, n)))
    row = one(conn.execute(statement, params))
    if count:
        limit.tenant_rows = int(row["tenant_rows"])
        limit.visible_rows = int(row["visible_rows"])
    return limit


def tenant_rows(conn: DictConnection, tenant: str) -> int:
    """The tenant's number of chunks (every chunk, with or without its embedding yet): the sum of
    its counter slots of migration 0009, a few rows of one index whatever the tenant's size."""
    row = one(conn.execute(f"SELECT ({sql.TENANT_ROWS}) AS n", {"tenant": tenant}))
    return int(row["n"])


def scope_rows(conn: DictConnection, req: SearchRequest) -> tuple[int, int]:
    """The tenant's chunks and those the caller's groups admit (:func:`vector_path`'s inputs)."""
    params = {"tenant": req.tenant, "groups": req.groups}
    row = one(conn.execute(f"SELECT ({sql.TENANT_ROWS}) AS t, ({sql.VISIBLE_ROWS}) AS v", params))
    return int(row["t"]), int(row["v"])
