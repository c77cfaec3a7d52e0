"""Hybrid retrieval: pgvector HNSW + Postgres full text, fused by the fusion policy; exact lookup.

:func:`search` is the orchestrator: it runs the retrievers the request's mode asks for
(:mod:`ragline.query.retrieval.retrievers`) in one read-only transaction scoped to the caller
(:mod:`ragline.query.retrieval.transaction`), hands their lists
to :mod:`ragline.query.retrieval.ranking`, the one place their order is decided (fusion, the named
files, the structural re-score, the file list's leads). The statements' texts are :mod:`ragline.query.retrieval.sql`'s.

The retrievers are called through their module, so a test that replaces one
(``monkeypatch.setattr(retrievers, "lexical_rows", ...)``) replaces it for every search.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg.pq import TransactionStatus

from ragline.query import deadline
from ragline.query.retrieval import ranking, retrievers
from ragline.query.retrieval.filters import has_terms
from ragline.query.retrieval.transaction import StatementLimit, read_only_transaction, set_transaction_params
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import SearchRequest, SearchResponse
from ragline.shared.worker.db import DictConnection
from ragline.shared.worker.timing import elapsed_ms

#: how many candidates each list (vector, lexical) brings to fusion, at least the hits asked for.
#: Measured, not a deployment's choice: the fusion and structure weights were fitted on lists this
#: deep, and the vector list's places past ranking.BACKGROUND_FROM are the background a hit's
#: ``vector_z`` (and so the answer's fitted confidence) is standardised against. Read at each
#: search, so an evaluation varies it by setting the module's attribute for its run.
LIST_DEPTH = 50


def search(
    conn: DictConnection,
    req: SearchRequest,
    qvec: np.ndarray | None,
    settings: Settings,
    limit: int | None = None,
    policy: ranking.RankingPolicy | None = None,
) -> SearchResponse:
    """Run the retrievers the mode asks for and fuse them. ``qvec`` None means no vector search.

    ``limit`` (default ``req.k``) is how many fused hits to keep: more when a reranker follows.
    ``policy``: how the search is ordered (:class:`ranking.RankingPolicy`), built from ``req`` when
    the caller has none.
    """
    timings: dict[str, float] = {}
    if not req.groups:
        return SearchResponse(hits=[], timings_ms=timings)
    if req.mode == "lexical_code":
        return lexical_code_search(conn, req, settings, limit, policy)
    policy = policy or ranking.RankingPolicy.of(req, settings)
    if conn.info.transaction_status != TransactionStatus.IDLE:
        # inside a caller's transaction this would be a savepoint: SET LOCAL would outlive the search
        # and READ ONLY would bind the caller's transaction
        raise RuntimeError("retrieval needs an idle connection: it runs its own read-only transaction")
    deadline.check("retrieval")
    limit = limit or req.k
    n = max(LIST_DEPTH, limit)
    lists = _Lists()
    statements = StatementLimit(settings)
    try:
        with read_only_transaction(conn):
            if req.mode == "exact":
                t = time.perf_counter()
                set_transaction_params(conn, req, settings, limit=statements)
                lists.stage = "the exact lookup"
                hits = [policy.hit(r) for r in retrievers.exact_rows(conn, req, settings)]
                timings["exact"] = elapsed_ms(t)
                return SearchResponse(hits=hits, timings_ms=timings)
            _retrieve(
                conn,
                req,
                qvec if req.mode in ("hybrid", "vector") else None,
                settings,
                n,
                statements,
                lists,
                timings,
                policy,
            )
    except psycopg.errors.QueryCanceled as exc:
        if "statement timeout" not in str(exc):
            raise
        raise statements.error(lists.stage) from None
    vector, lexical, named, coverage = lists.vector, lists.lexical, lists.named, lists.coverage
    t = time.perf_counter()
    hits, structured = policy.order(vector, lexical, named, limit, n, coverage.share)
    if structured:
        timings["structure"] = elapsed_ms(t)
    resp = SearchResponse(
        hits=hits,
        timings_ms=timings,
        unembedded_rows=coverage.unembedded,
        lexical_only_rows=coverage.lexical_only,
        vectors_complete=not coverage.unembedded,
        vector_share=round(coverage.share, 6),
    )
    return resp.with_list_leads(policy.leads(vector, lexical, named))


@dataclass
class _Lists:
    """What a search's retrievers found, and the statement running (named when it times out)."""

    vector: list[dict] = field(default_factory=list)
    lexical: list[dict] = field(default_factory=list)
    named: list[dict] = field(default_factory=list)
    coverage: retrievers.Coverage = field(default_factory=retrievers.Coverage)
    stage: str = "the retrieval settings"


def _retrieve(
    conn: DictConnection,
    req: SearchRequest,
    query_vector: np.ndarray | None,
    settings: Settings,
    n: int,
    statements: StatementLimit,
    lists: _Lists,
    timings: dict[str, float],
    policy: ranking.RankingPolicy,
) -> None:
    """The vector, lexical and named-files statements the request asks for, into ``lists``, in the
    search's transaction (``query_vector`` None: no vector search)."""
    lexical_search = req.mode in ("hybrid", "lexical") and has_terms(req.query)
    if query_vector is None and not lexical_search:
        return
    set_transaction_params(conn, req, settings, n if query_vector is not None else None, statements)
    if query_vector is not None:
        t = time.perf_counter()
        lists.stage = "the vector search"
        lists.vector, lists.coverage = retrievers.vector_search(
            conn, req, query_vector, n, settings, statements.vector_path(settings)
        )
        timings["vector"] = elapsed_ms(t)
    if lexical_search:
        t = time.perf_counter()
        if query_vector is not None:
            statements.tighten(conn, "the lexical search")
        lists.stage = "the lexical search"
        lists.lexical = retrievers.lexical_rows(conn, req, n, settings)
        timings["lexical"] = elapsed_ms(t)
    if policy.reads_named_files:
        t = time.perf_counter()
        statements.tighten(conn, "the named files")
        lists.stage = "the named files"
        lists.named = retrievers.named_rows(conn, req, query_vector, settings, policy.named.files)
        timings["named"] = elapsed_ms(t)


def lexical_code_search(
    conn: DictConnection,
    req: SearchRequest,
    settings: Settings,
    limit: int | None = None,
    policy: ranking.RankingPolicy | None = None,
) -> SearchResponse:
    """The retrieval contract's lexical code fallback (mode ``lexical_code``): lexical search of the
    source layer (``RAGLINE_CODE_SOURCE_LAYER``) alone, whatever layers the request names, for a
    caller whose embedder is down or who wants identifiers matched as written. A query without a
    single term runs no statement at all, not even the transaction's ``BEGIN``: the fallback is
    what a caller reaches for when everything else failed, and must cost nothing when it cannot
    match."""
    if not has_terms(req.query):
        return SearchResponse(hits=[], timings_ms={})
    source = req.model_copy(update={"mode": "lexical", "layers": [settings.code.source_layer]})
    return search(conn, source, None, settings, limit, policy)
