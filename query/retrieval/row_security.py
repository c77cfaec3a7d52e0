"""The query pool's start-up check of row-level security: is the pool's database role bound by the
policies of migration 0007, and can its lexical search still use the GIN index under them.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import DictRow

from ragline.shared.worker.db import one


def row_security_problem(conn: psycopg.Connection[DictRow]) -> str | None:
    """What weakens row-level security on ``conn``'s role, or None: the role is not bound by the
    policies of migration 0007 (the owner, a superuser, not a member of ``ragline_query``), or it is
    and its lexical search cannot use the GIN index (``tsvector @@ tsquery`` is not leakproof)."""
    row = one(
        conn.execute(
            "SELECT current_user AS who, r.rolsuper OR r.rolbypassrls"
            " OR pg_has_role(current_user, c.relowner, 'USAGE')"
            " OR CASE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = 'ragline_query')"
            " THEN NOT pg_has_role(current_user, 'ragline_query', 'USAGE') ELSE true END AS unbound,"
            " p.proleakproof AS leakproof"
            " FROM pg_proc p, pg_class c, pg_roles r"
            " WHERE p.oid = 'pg_catalog.ts_match_vq(tsvector, tsquery)'::regprocedure"
            " AND c.oid = 'chunks'::regclass AND r.rolname = current_user"
        )
    )
    conn.rollback()
    if row["unbound"]:
        return (
            f"the query pool connects as {row['who']}, which row-level security does not bind:"
            " set RAGLINE_SERVICES_QUERY_DATABASE_URL to a member of ragline_query (docs/operations.md)"
        )
    if not row["leakproof"]:
        return (
            "the lexical search reads every row of the tenant instead of its GIN index: row-level"
            " security binds the query role and ts_match_vq is not leakproof; a superuser can run"
            " ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF (docs/operations.md)"
        )
    return None
