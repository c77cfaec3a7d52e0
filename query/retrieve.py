"""Hybrid retrieval: pgvector HNSW + Postgres full text, fused by weighted RRF; exact lookup.

Tenant and ACL filters live in SQL ``WHERE`` of every statement, beside the contract filters of
:mod:`ragline.query.filters`; all statements of one search run in one read-only transaction with
``SET LOCAL`` for the HNSW search parameters.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import numpy as np
import psycopg
from psycopg.pq import TransactionStatus

from ragline.query.filters import clean_paths, compile_filters, has_terms, lexical_query
from ragline.query.fusion import rrf
from ragline.shared.contracts import Hit, SearchRequest, SearchResponse
from ragline.shared.settings import Settings
from ragline.shared.timing import elapsed_ms

_FIELDS = "c.doc_id, c.chunk_no, c.path, c.layer, c.heading_path, c.content, c.context, c.page, c.metadata"
_SCOPE = "c.tenant = %(tenant)s AND c.acl && %(groups)s::text[]"

# relaxed_order may return rows slightly out of order: re-sort the materialised candidates
VECTOR_SQL = """
WITH candidates AS MATERIALIZED (
    SELECT {fields}{columns}, c.embedding <=> %(qvec)s AS distance
    FROM chunks c
    WHERE {scope} AND c.embedding IS NOT NULL{where}
    ORDER BY c.embedding <=> %(qvec)s
    LIMIT %(n)s
)
SELECT * FROM candidates ORDER BY distance, doc_id, chunk_no
"""

# numnode(q) = 0 when the query holds only stop words: no rows, no NOTICE, same round trip;
# {rank_fn} is ts_rank or ts_rank_cd (a settings Literal, never user text)
LEXICAL_SQL = """
SELECT {fields}{columns}, {rank_fn}(c.tsv, q, %(rank_norm)s) AS rank
FROM chunks c, websearch_to_tsquery('russian', %(query)s) q
WHERE numnode(q) > 0 AND {scope} AND c.tsv @@ q{where}
ORDER BY rank DESC, c.doc_id, c.chunk_no
LIMIT %(n)s
"""

EXACT_SQL = """
SELECT {fields}{columns}
FROM chunks c
WHERE {scope} AND (c.doc_id = ANY(%(doc_ids)s::text[]) OR c.path = ANY(%(paths)s::text[])){where}
ORDER BY array_position(%(doc_ids)s::text[], c.doc_id), array_position(%(paths)s::text[], c.path), c.chunk_no
LIMIT %(n)s
"""


def _metadata(value: object) -> dict:
    """Always a dict, whatever the driver hands back (jsonb dict, JSON text, NULL)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, (str, bytes)):
        try:
            decoded = json.loads(value)
        except ValueError:
            return {}
        return decoded if isinstance(decoded, dict) else {}
    return {}


def _hit(row: dict, **ranking: float | int) -> Hit:
    return Hit(
        doc_id=row["doc_id"],
        chunk_no=row["chunk_no"],
        path=row["path"],
        layer=row["layer"],
        heading=row["heading_path"],
        content=row["content"],
        context=row["context"],
        page=row["page"],
        metadata=_metadata(row["metadata"]),
        prefer_bonus=float(row["prefer_bonus"]),
        test_penalty=float(row["test_penalty"]),
        **ranking,
    )


def _sql(template: str, columns: str, where: str, rank_fn: str = "ts_rank") -> str:
    assert rank_fn in ("ts_rank", "ts_rank_cd")
    return template.format(fields=_FIELDS, columns=columns, scope=_SCOPE, where=where, rank_fn=rank_fn)


@contextmanager
def read_only_transaction(conn: psycopg.Connection) -> Iterator[None]:
    """A read-only transaction whose mode travels with BEGIN (one round trip less than
    ``SET TRANSACTION READ ONLY``); the connection must be idle."""
    conn.read_only = True
    try:
        with conn.transaction():
            yield
    finally:
        with suppress(psycopg.Error):  # a broken connection is discarded by the pool anyway
            conn.read_only = None


def set_hnsw_params(conn: psycopg.Connection, n: int, settings: Settings) -> None:
    """The HNSW search parameters for this transaction, in one round trip (no parameters, so
    psycopg may send two statements at once)."""
    conn.execute(
        f"SET LOCAL hnsw.ef_search = {int(max(settings.retrieval.hnsw_ef_search, n))};"
        " SET LOCAL hnsw.iterative_scan = relaxed_order"
    )


def vector_rows(
    conn: psycopg.Connection, req: SearchRequest, qvec: np.ndarray, n: int, settings: Settings
) -> list[dict]:
    f = compile_filters(req, settings.retrieval.prefer_bonus, settings.retrieval.test_penalty)
    set_hnsw_params(conn, n, settings)
    params = {"tenant": req.tenant, "groups": req.groups, "n": n, "qvec": qvec, **f.params}
    return conn.execute(_sql(VECTOR_SQL, f.columns_sql(), f.where_sql()), params).fetchall()


def lexical_rows(
    conn: psycopg.Connection | None, req: SearchRequest, n: int, settings: Settings
) -> list[dict]:
    """Empty without touching the database when the query has no terms."""
    if not has_terms(req.query):
        return []
    assert conn is not None
    f = compile_filters(req, settings.retrieval.prefer_bonus, settings.retrieval.test_penalty)
    params = {
        "tenant": req.tenant,
        "groups": req.groups,
        "n": n,
        "query": lexical_query(req.query, settings.retrieval.lexical_match),
        "rank_norm": settings.retrieval.lexical_rank_normalization,
        **f.params,
    }
    sql = _sql(LEXICAL_SQL, f.columns_sql(), f.where_sql(), settings.retrieval.lexical_rank)
    return conn.execute(sql, params).fetchall()


def exact_rows(conn: psycopg.Connection | None, req: SearchRequest, settings: Settings) -> list[dict]:
    """The chunks of the given documents or paths, in the order asked, no vectors; empty paths dropped."""
    doc_ids = [d.strip() for d in req.doc_ids if d.strip()]
    paths = clean_paths(req.paths)
    if not (doc_ids or paths) or not req.groups:
        return []
    assert conn is not None
    f = compile_filters(req, settings.retrieval.prefer_bonus, settings.retrieval.test_penalty)
    params = {
        "tenant": req.tenant,
        "groups": req.groups,
        "n": req.k,
        "doc_ids": doc_ids,
        "paths": paths,
        **f.params,
    }
    return conn.execute(_sql(EXACT_SQL, f.columns_sql(), f.where_sql()), params).fetchall()


def fuse(vector: list[dict], lexical: list[dict], settings: Settings, limit: int) -> list[Hit]:
    """Weighted RRF over the two ranked lists, plus prefer bonus, minus test penalty; pure.

    Scores are computed on the rows; only the ``limit`` kept become :class:`Hit` models: a question
    has many more candidates than hits, and a model per candidate would dominate the task's own time."""
    rows: dict[tuple[str, int], dict] = {}
    ranks: dict[tuple[str, int], dict[str, float | int]] = {}
    for rank, row in enumerate(vector, start=1):
        key = (row["doc_id"], row["chunk_no"])
        rows.setdefault(key, row)
        ranks.setdefault(key, {}).update(vector_rank=rank, vector_distance=float(row["distance"]))
    for rank, row in enumerate(lexical, start=1):
        key = (row["doc_id"], row["chunk_no"])
        rows.setdefault(key, row)
        ranks.setdefault(key, {}).update(lexical_rank=rank, lexical_score=float(row["rank"]))
    fused = rrf(
        {
            "vector": [(r["doc_id"], r["chunk_no"]) for r in vector],
            "lexical": [(r["doc_id"], r["chunk_no"]) for r in lexical],
        },
        k=settings.retrieval.rrf_k,
        weights={
            "vector": settings.retrieval.rrf_weight_vector,
            "lexical": settings.retrieval.rrf_weight_lexical,
        },
    )
    scored = []
    for position, (key, score) in enumerate(fused):
        row = rows[key]
        final = round(score + float(row["prefer_bonus"]) - float(row["test_penalty"]), 8)
        scored.append((final, position, key, score))
    # a stable sort keeps RRF's own tie-breaking among equal final scores
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [
        _hit(rows[key], score=final, fused_score=round(score, 8), **ranks[key])
        for final, _, key, score in scored[:limit]
    ]


def search(
    conn: psycopg.Connection,
    req: SearchRequest,
    qvec: np.ndarray | None,
    settings: Settings,
    limit: int | None = None,
) -> SearchResponse:
    """Run the retrievers the mode asks for and fuse them. ``qvec`` None means no vector search.

    ``limit`` (default ``req.k``) is how many fused hits to keep: more when a reranker follows.
    """
    timings: dict[str, float] = {}
    if not req.groups:
        return SearchResponse(hits=[], timings_ms=timings)
    if conn.info.transaction_status != TransactionStatus.IDLE:
        # inside a caller's transaction this would be a savepoint: SET LOCAL would outlive the search
        # and READ ONLY would bind the caller's transaction
        raise RuntimeError("retrieval needs an idle connection: it runs its own read-only transaction")
    limit = limit or req.k
    n = max(settings.retrieval.top_n, limit)
    vector: list[dict] = []
    lexical: list[dict] = []
    with read_only_transaction(conn):
        if req.mode == "exact":
            t = time.perf_counter()
            hits = [_hit(r) for r in exact_rows(conn, req, settings)]
            timings["exact"] = elapsed_ms(t)
            return SearchResponse(hits=hits, timings_ms=timings)
        if req.mode in ("hybrid", "vector") and qvec is not None:
            t = time.perf_counter()
            vector = vector_rows(conn, req, qvec, n, settings)
            timings["vector"] = elapsed_ms(t)
        if req.mode in ("hybrid", "lexical"):
            t = time.perf_counter()
            lexical = lexical_rows(conn, req, n, settings)
            timings["lexical"] = elapsed_ms(t)
    return SearchResponse(hits=fuse(vector, lexical, settings, limit), timings_ms=timings)
