"""Hybrid retrieval: pgvector HNSW + Postgres full text, fused by RRF.

Tenant and ACL filters live in SQL ``WHERE`` of every statement; both retrievers run in one
read-only transaction with ``SET LOCAL`` for the HNSW search parameters.
"""

from __future__ import annotations

import time

import numpy as np
import psycopg

from query.fusion import rrf
from shared.contracts import Hit, SearchRequest, SearchResponse
from shared.settings import Settings

_FIELDS = "c.doc_id, c.chunk_no, c.path, c.heading_path, c.content, c.context, c.page, c.metadata"

VECTOR_SQL = f"""
SELECT {_FIELDS}, c.embedding <=> %(qvec)s AS distance
FROM chunks c
WHERE c.tenant = %(tenant)s AND c.acl && %(groups)s::text[] AND c.embedding IS NOT NULL
ORDER BY c.embedding <=> %(qvec)s
LIMIT %(n)s
"""

LEXICAL_SQL = f"""
SELECT {_FIELDS}, ts_rank_cd(c.tsv, q) AS rank
FROM chunks c, websearch_to_tsquery('russian', %(query)s) q
WHERE c.tenant = %(tenant)s AND c.acl && %(groups)s::text[] AND c.tsv @@ q
ORDER BY rank DESC, c.doc_id, c.chunk_no
LIMIT %(n)s
"""


def has_lexical_terms(conn: psycopg.Connection, query: str) -> bool:
    row = conn.execute("SELECT numnode(websearch_to_tsquery('russian', %s)) AS n", (query,)).fetchone()
    return bool(row and row["n"])


def _hit(row: dict) -> Hit:
    return Hit(doc_id=row["doc_id"], chunk_no=row["chunk_no"], path=row["path"], heading=row["heading_path"],
               content=row["content"], context=row["context"], page=row["page"], metadata=row["metadata"] or {})


def search(conn: psycopg.Connection, req: SearchRequest, qvec: np.ndarray | None, settings: Settings) -> SearchResponse:
    """Run the retrievers the mode asks for and fuse them. ``qvec`` None means no vector search."""
    timings: dict[str, float] = {}
    if not req.groups:
        return SearchResponse(hits=[], timings_ms=timings)
    n = max(settings.retrieval_top_n, req.k)
    params = {"tenant": req.tenant, "groups": req.groups, "n": n, "query": req.query}
    vector_rows: list[dict] = []
    lexical_rows: list[dict] = []
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        if req.mode in ("hybrid", "vector") and qvec is not None:
            t = time.perf_counter()
            conn.execute(f"SET LOCAL hnsw.ef_search = {int(max(settings.hnsw_ef_search, n))}")
            conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            vector_rows = conn.execute(VECTOR_SQL, {**params, "qvec": qvec}).fetchall()
            timings["vector"] = round((time.perf_counter() - t) * 1000, 2)
        if req.mode in ("hybrid", "lexical") and has_lexical_terms(conn, req.query):
            t = time.perf_counter()
            lexical_rows = conn.execute(LEXICAL_SQL, params).fetchall()
            timings["lexical"] = round((time.perf_counter() - t) * 1000, 2)
    hits: dict[tuple[str, int], Hit] = {}
    for rank, row in enumerate(vector_rows, start=1):
        h = hits.setdefault((row["doc_id"], row["chunk_no"]), _hit(row))
        h.vector_rank, h.vector_distance = rank, float(row["distance"])
    for rank, row in enumerate(lexical_rows, start=1):
        h = hits.setdefault((row["doc_id"], row["chunk_no"]), _hit(row))
        h.lexical_rank, h.lexical_score = rank, float(row["rank"])
    fused = rrf(
        {"vector": [(r["doc_id"], r["chunk_no"]) for r in vector_rows],
         "lexical": [(r["doc_id"], r["chunk_no"]) for r in lexical_rows]},
        k=settings.rrf_k,
        weights={"vector": settings.rrf_weight_vector, "lexical": settings.rrf_weight_lexical},
    )
    out = []
    for key, score in fused[: req.k]:
        h = hits[key]
        h.score = round(score, 6)
        out.append(h)
    return SearchResponse(hits=out, timings_ms=timings)
