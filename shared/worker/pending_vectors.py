"""Rows stored before their vectors: the one definition of "not yet embedded".

A document stored searchable before it is embedded (``RAGLINE_INGEST_DEFER_VECTORS``) has rows
with a NULL ``embedding`` (and ``embed_model``) until the fill task on the ingest pool writes
them; the vector search skips them, the lexical search finds them. Search responses count them
in the caller's scope, ``ragline status`` per tenant; the partial index of migration 0014 keeps
both counts to the pending rows alone.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import DictRow

#: a chunk row that has no vector yet (``c`` is the chunks alias of every statement using it)
PREDICATE = "c.embedding IS NULL"


def by_tenant(conn: psycopg.Connection[DictRow]) -> dict[str, int]:
    """Rows awaiting their vectors, per tenant (tenants with none are left out)."""
    rows = conn.execute(
        f"SELECT c.tenant, count(*) AS n FROM chunks c WHERE {PREDICATE} GROUP BY c.tenant ORDER BY c.tenant"
    ).fetchall()
    return {r["tenant"]: int(r["n"]) for r in rows}
