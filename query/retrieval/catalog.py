"""What is indexed for a caller (the ``sources`` of ``ragline mcp``): its tenant's documents grouped by
source, counted in SQL under the same scope as every search.

The statement reads ``documents`` with the tenant and ACL condition in its ``WHERE`` (the one scope
of :data:`ragline.query.retrieval.sql.SCOPE`, on the documents' alias) inside the read-only
transaction of :mod:`ragline.query.retrieval.transaction`, which also sets the row-level security
scope of the query role: a document the caller's groups do not admit is never counted, its source
and commit never named.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from ragline.query.retrieval import sql
from ragline.query.retrieval.transaction import read_only_transaction, set_transaction_params
from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.sdk.contracts import SearchRequest, SourceInfo, SourcesRequest, SourcesResponse
from ragline.shared.worker import db
from ragline.shared.worker.logging_setup import log_query
from ragline.shared.worker.timing import elapsed_ms

#: at most this many commits named per source (a source re-ingested commit by commit keeps old
#: commits only on the documents those commits last changed), newest documents' first
MAX_COMMITS = 20

SOURCES_SQL = f"""
SELECT coalesce(c.metadata->>'source', '') AS source,
       count(*) AS documents,
       coalesce(sum(c.chunk_count), 0) AS chunks,
       array_agg(DISTINCT c.layer ORDER BY c.layer) AS layers,
       (array_agg(c.metadata->>'commit' ORDER BY c.updated_at DESC)
            FILTER (WHERE c.metadata ? 'commit')) AS commits,
       max(c.updated_at) AS updated_at
FROM documents c
WHERE {sql.SCOPE} AND c.status = 'ready'
GROUP BY 1
ORDER BY 1
"""


def sources(conn: psycopg.Connection[Any], req: SourcesRequest, settings: Settings) -> SourcesResponse:
    """The caller's sources, counted over the documents its groups admit."""
    if not req.groups:
        return SourcesResponse(sources=[])
    scope = SearchRequest(tenant=req.tenant, groups=req.groups)
    with read_only_transaction(conn):
        set_transaction_params(conn, scope, settings)
        rows = conn.execute(SOURCES_SQL, {"tenant": req.tenant, "groups": req.groups}).fetchall()
    found = [
        SourceInfo(
            source=r["source"],
            documents=int(r["documents"]),
            chunks=int(r["chunks"]),
            layers=list(r["layers"] or []),
            commits=list(dict.fromkeys(r["commits"] or []))[:MAX_COMMITS],
            updated_at=r["updated_at"].isoformat() if r["updated_at"] else None,
        )
        for r in rows
    ]
    return SourcesResponse(
        sources=found, documents=sum(s.documents for s in found), chunks=sum(s.chunks for s in found)
    )


def indexed_sources(req: SourcesRequest) -> SourcesResponse:
    """:func:`sources` on a connection of the query pool's read-only role, logged like a search."""
    settings = get_settings()
    t0 = time.perf_counter()
    with db.query_connection() as conn:
        resp = sources(conn, req, settings)
    log_query(
        "sources",
        tenant=req.tenant,
        question="",
        latency_ms=elapsed_ms(t0),
        chunks=resp.chunks,
        model=settings.embed.model_name,
        sources=len(resp.sources),
    )
    return resp
