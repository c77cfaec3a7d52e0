"""Search, rerank and ask, orchestrated without Celery (tasks and tests call these).

An ask goes one way: its plan (:mod:`ragline.query.plan`, built once from the request and the
settings), the plan executed on one connection (:func:`gather`) into its evidence, then the answer
stages (:func:`ragline.query.answer.run.respond`) over the plan and the evidence. The search side
never sees the answer side's :class:`~ragline.query.answer.run.QuestionRun`.

Each stage degrades instead of failing: no query embedding → lexical only; reranker slow or
broken → fused order; generator broken → extractive answer. Every fallback sets ``degraded``
and says why in ``degraded_reasons``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable
from contextlib import nullcontext
from dataclasses import replace
from types import MappingProxyType

import numpy as np
import psycopg

from ragline.query import plan
from ragline.query.answer import agentic
from ragline.query.answer.agentic import (
    CoveragePlanner,
    LLMPlanner,
    LoopResult,
    Planner,
    agentic_loop,
)
from ragline.query.answer.run import NOTHING_RELEVANT, QuestionRun, respond
from ragline.query.deadline import DeadlineExceeded, run_with_deadline
from ragline.query.plan import Evidence, QueryPlan
from ragline.query.retrieval import file_rank
from ragline.query.retrieval.cache import LRU, scoped_key
from ragline.query.retrieval.fusion import FusionPolicy
from ragline.query.retrieval.ranking import RankingPolicy
from ragline.query.retrieval.rerank import RerankOutcome, fallback, rerank_hits
from ragline.query.retrieval.retrievers import corpus_plan, document_chunks
from ragline.query.retrieval.search import search as sql_search
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import (
    AskRequest,
    AskResponse,
    Hit,
    RerankRequest,
    RerankResponse,
    SearchRequest,
    SearchResponse,
)
from ragline.shared.worker import db, providers
from ragline.shared.worker import metrics as m
from ragline.shared.worker.logging_setup import log_query
from ragline.shared.worker.text import embedding_form
from ragline.shared.worker.timing import elapsed_ms

log = logging.getLogger(__name__)

TRACE_FIELDS = {
    "doc_id",
    "chunk_no",
    "score",
    "fused_score",
    "vector_rank",
    "vector_distance",
    "vector_z",
    "lexical_rank",
    "lexical_score",
    "prefer_bonus",
    "test_penalty",
    "rerank_score",
}


def trace_of(hits: list[Hit]) -> list[dict]:
    return [h.model_dump(include=TRACE_FIELDS, exclude_none=True) for h in hits]


# ----------------------------------------------------------------------------------- embeddings
def _embed_query(req: SearchRequest, reasons: list[str]) -> np.ndarray | None:
    settings = get_settings()
    cache: LRU = providers.cached("query_embeddings", lambda s: LRU(s.retrieval.query_cache_size))
    key = scoped_key(req.tenant, req.groups, settings.embed.model_name, req.query)
    hit = cache.get(key)
    if hit is not None:
        return hit  # type: ignore[return-value]
    try:
        embedder = providers.get_embedder()
        # the embedder's retry policy is made for ingestion; a question waits at most this long
        vec = np.asarray(
            run_with_deadline(
                embedder.embed_query, settings.deadlines.query_embed_timeout_s, embedding_form(req.query)
            ),
            dtype=np.float32,
        )
    except DeadlineExceeded:
        log.warning("query embedding exceeded %.1fs, lexical only", settings.deadlines.query_embed_timeout_s)
        reasons.append(f"embedder: timeout after {settings.deadlines.query_embed_timeout_s:g}s")
        return None
    except Exception as exc:  # any provider failure degrades to lexical search
        log.warning("query embedding failed, lexical only: %s", type(exc).__name__)
        reasons.append(f"embedder: {type(exc).__name__}")
        return None
    cache.put(key, vec)
    return vec


# ------------------------------------------------------------------------------------ retrieval
def _without_corpus_names(
    conn: db.DictConnection, req: SearchRequest, reasons: list[str]
) -> tuple[SearchRequest, list[str]]:
    """The request both lists search with: the question without the names of the collection it
    asks about, within that collection's documents (:mod:`ragline.query.retrieval.terms`). A failed
    statistics statement leaves the question as it is. ``conn`` is the question's connection (idle:
    the statistics run in their own read-only transaction, before the embedding they may change)."""
    if req.mode in ("exact", "lexical_code") or not req.groups:
        return req, []
    try:
        plan = corpus_plan(conn, req, get_settings())
    except psycopg.errors.QueryCanceled:
        reasons.append("corpus terms: statement timeout")
        return req, []
    if not plan.changed:
        return req, []
    update: dict[str, object] = {"query": plan.lexical_text}
    if not req.path_prefixes:  # the question says which collection answers: only its documents
        update["path_prefixes"] = [f"{s}/" for s in plan.sources]
    return req.model_copy(update=update), list(plan.names)


def retrieve(
    req: SearchRequest, limit: int | None = None, conn: db.DictConnection | None = None
) -> SearchResponse:
    """Fused candidates (no rerank): ``limit`` of them, default ``req.k``.

    One connection of the query pool's role (the read-only role that row-level security binds,
    migration 0007) serves the whole search: the collection's names, then the search itself. It
    is held while the question is embedded, which costs a pool slot for that time (the pools
    are sized two connections per task thread, ``shared/worker/db.py``) but no transaction, and
    saves a checkout with its liveness round trip per question. ``conn``: the question's
    connection when it runs several searches (an ask's plan, :func:`gather`); else one is checked
    out for this search."""
    settings = get_settings()
    t0 = time.perf_counter()
    reasons: list[str] = []
    mode = req.mode
    qvec = None
    with nullcontext(conn) if conn is not None else db.query_connection() as conn:
        req, names = _without_corpus_names(conn, req, reasons)
        if req.query_vector is not None:
            qvec = np.asarray(req.query_vector, dtype=np.float32)
        elif mode in ("hybrid", "vector") and req.groups:
            qvec = _embed_query(req, reasons)
            if qvec is None:
                mode = "lexical"
        t_embed = time.perf_counter()
        policy = RankingPolicy.of(req, settings)  # how this search is ordered, decided once
        resp = sql_search(conn, req.model_copy(update={"mode": mode}), qvec, settings, limit, policy)
    if resp.unembedded_rows:
        reasons.append(awaiting_reason(resp.unembedded_rows))
    resp.degraded = bool(reasons)
    resp.degraded_reasons = reasons
    resp.corpus_names = names
    resp.timings_ms = {"embed_query": elapsed_ms(t0, t_embed), **resp.timings_ms, "total": elapsed_ms(t0)}
    m.RETRIEVAL_LATENCY_MS.labels(mode=mode).observe(resp.timings_ms["total"])
    for reason in reasons:
        m.QUERY_DEGRADED.labels(reason=reason.split(":", 1)[0]).inc()
    return resp


def awaiting_reason(rows: int) -> str:
    """The degraded reason of a search whose scope holds rows awaiting their vectors (the fill):
    they were found by the lexical and structural search only (pure)."""
    return f"vectors pending: {rows} rows in scope await their vectors, found lexically only until filled"


#: reranked hits scoring below this (the provider's own score) are dropped, unless the caller's
#: rerank request sets its own: 0 keeps every hit of a provider scoring in [0, 1] (Voyage) and drops
#: a cross-encoder's negative logits. Read at each rerank (an evaluation sets it for its run)
RERANK_THRESHOLD = 0.0


def rerank_stage(
    query: str, candidates: list[Hit], top_k: int, threshold: float | None = None
) -> RerankOutcome:
    """Rerank with the configured provider; a provider that cannot even be built degrades too."""
    settings = get_settings()
    threshold = RERANK_THRESHOLD if threshold is None else threshold
    try:
        reranker = providers.get_reranker()
    except Exception as exc:
        return fallback(candidates, top_k, "config", f"{type(exc).__name__}: {exc}")
    if reranker is None:
        return RerankOutcome(hits=candidates[:top_k])
    r = settings.rerank
    out = rerank_hits(
        reranker, query, candidates, top_k, threshold, r.timeout_s, r.max_candidates, r.max_chars
    )
    if candidates:  # an empty candidate list never reaches the provider
        m.RERANK_LATENCY_MS.labels(provider=r.provider).observe(out.ms)
    return out


def search(req: SearchRequest, conn: db.DictConnection | None = None) -> SearchResponse:
    """Retrieve (and rerank when asked or configured); ``k`` hits. ``conn``: as :func:`retrieve`'s."""
    settings = get_settings()
    t0 = time.perf_counter()
    rerank = plan.use_rerank(req, settings)
    resp = retrieve(req, limit=max(req.k, settings.rerank.candidates) if rerank else req.k, conn=conn)
    if rerank:
        t = time.perf_counter()
        out = rerank_stage(req.query, resp.hits, req.k)
        resp.hits = out.hits
        resp.degraded = resp.degraded or out.degraded
        resp.degraded_reasons += out.reasons
        resp.timings_ms["rerank"] = elapsed_ms(t)
        resp.timings_ms["total"] = elapsed_ms(t0)
    resp.files = file_rank.response_files(resp.hits, req.query, settings, resp.list_leads)
    m.RETRIEVED_CHUNKS.observe(len(resp.hits))
    log_query(
        "search",
        tenant=req.tenant,
        question=req.query,
        latency_ms=resp.timings_ms["total"],
        chunks=len(resp.hits),
        model=settings.embed.model_name,
        mode=req.mode,
        degraded=resp.degraded,
    )
    return resp


def rerank(req: RerankRequest) -> RerankResponse:
    settings = get_settings()
    t0 = time.perf_counter()
    out = rerank_stage(req.query, req.hits, req.top_k or settings.rerank.top_k, req.threshold)
    return RerankResponse(
        hits=out.hits,
        degraded=out.degraded,
        degraded_reasons=out.reasons,
        timings_ms={"rerank": elapsed_ms(t0)},
    )


# --------------------------------------------------------------------------------------- answers
def gather(planned: QueryPlan) -> Evidence:
    """Execute ``planned`` on one connection of the query pool into the evidence the answer reads:
    each query's search (its collection names, embedding and statements), their fusion, the rerank
    and the expansion. Each statement group runs in its own read-only transaction, as a single
    search's does: no transaction stays open over the embedder's or the reranker's call."""
    t = time.perf_counter()
    reasons: list[str] = []
    timings: dict[str, float] = {}
    trace: dict[str, object] = {}
    names: list[str] = []
    lists: list[list[Hit]] = []
    unembedded, share = 0, 1.0
    with db.query_connection() as conn:
        for i in range(len(planned.queries)):
            resp = retrieve(planned.search(i), limit=planned.candidates, conn=conn)
            lists.append(resp.hits)
            unembedded = max(unembedded, resp.unembedded_rows)
            share = min(share, resp.vector_share)
            names += [n for n in resp.corpus_names if n not in names]
            reasons += [r for r in resp.degraded_reasons if r not in reasons]
            for k, v in resp.timings_ms.items():
                timings[f"retrieve.{k}"] = round(timings.get(f"retrieve.{k}", 0.0) + v, 2)
        candidates = fuse_variants(lists, planned.fusion, planned.candidates)
        if names:
            trace["corpus_names"] = names
        timings["retrieve"] = elapsed_ms(t)
        trace["retrieved"] = trace_of(candidates)
        t = time.perf_counter()
        if planned.rerank:
            out = rerank_stage(planned.queries[0], candidates, planned.k)
            hits = out.hits
            reasons += out.reasons
            timings["rerank"] = elapsed_ms(t)
            trace["reranked"] = trace_of(hits)
        else:
            hits = [h for h in candidates if h.score >= planned.min_score][: planned.k]
        hits = _expanded(conn, planned, hits, timings, trace)
    # the composer's evidence: how many rows of the scope only the lexical search could see
    trace["unembedded_rows"] = unembedded
    return Evidence(
        hits=tuple(hits),
        candidates=len(candidates),
        unembedded_rows=unembedded,
        vector_share=share,
        reasons=tuple(reasons),
        timings=MappingProxyType(timings),
        trace=MappingProxyType(trace),
    )


def fuse_variants(lists: list[list[Hit]], policy: FusionPolicy, limit: int) -> list[Hit]:
    """The hits of one or more query variants (multi-query, the router's sub-queries), each list
    already fused, fused by rank under ``policy``: the first ``limit`` (pure)."""
    if len(lists) == 1:
        return lists[0]
    by_key: dict[Hashable, Hit] = {}
    for hits in lists:
        for h in hits:
            by_key.setdefault((h.doc_id, h.chunk_no), h)
    fused = policy.by_rank({str(i): [(h.doc_id, h.chunk_no) for h in hits] for i, hits in enumerate(lists)})
    out = []
    for key, score in fused[:limit]:
        h = by_key[key].model_copy()
        h.fused_score = h.score = round(score, 8)
        out.append(h)
    return out


def ask(req: AskRequest) -> AskResponse:
    """The question answered: planned (:func:`ragline.query.plan.build`: transforms, router), the
    plan executed (:func:`gather`: retrieval, rerank, expansion), then the answer stages over the
    plan and its evidence (:func:`ragline.query.answer.run.respond`)."""
    settings = get_settings()
    t0 = time.perf_counter()
    if req.agentic if req.agentic is not None else settings.answer.agentic:
        return agentic_ask(req)
    run = QuestionRun.start(req.query, settings, t0)  # the generator, resolved once: planning may ask it
    planned = plan.build(req, settings, run.generator.completion, run.generator_error, t0)
    evidence = gather(planned)
    run.read(planned, evidence)
    empty = NOTHING_RELEVANT
    if not evidence.candidates:  # the caller's groups see nothing that matches (or nothing at all)
        empty = "no document visible to the caller's groups matches the question"
    resp = respond(run, list(evidence.hits), empty_reason=empty)
    resp.unembedded_rows, resp.vectors_complete = evidence.unembedded_rows, not evidence.unembedded_rows
    log_query(
        "ask",
        tenant=req.tenant,
        question=req.query,
        latency_ms=resp.timings_ms["total"],
        chunks=len(evidence.hits),
        model=settings.answer.provider,
        no_answer=resp.no_answer,
        degraded=resp.degraded,
        rejected_citations=len(run.trace.get("rejected_citations", [])),
    )
    return resp


def _expanded(
    conn: db.DictConnection,
    planned: QueryPlan,
    hits: list[Hit],
    timings: dict[str, float],
    trace: dict[str, object],
) -> list[Hit]:
    """The hits with their sections or documents (``planned.expansion``,
    :mod:`ragline.query.retrieval.expand`), read on the plan's connection; the chunks added are in
    the trace. Reading them failed or timed out: the hits as they were."""
    policy = planned.expansion
    docs = policy.documents(hits)
    if not docs:
        return hits
    t = time.perf_counter()
    try:
        chunks = document_chunks(conn, planned.request(), docs, get_settings(), 50 * len(docs))
    except psycopg.errors.QueryCanceled:
        return hits
    out = policy.expand(hits, chunks)
    found = {(h.doc_id, h.chunk_no) for h in hits}
    added = [[h.doc_id, h.chunk_no] for h in out if (h.doc_id, h.chunk_no) not in found]
    trace["expanded"] = {"mode": policy.mode, "added": added}
    timings["expand"] = elapsed_ms(t)
    return out


def agentic_ask(req: AskRequest) -> AskResponse:
    """Search, judge, search again within the budget (``agentic``), then answer from the evidence;
    the searches share one connection, as a plan's do."""
    settings = get_settings()
    run = QuestionRun.start(req.query, settings)
    # the question's search fields only: a field only asks have (history, agentic, stream, expand, ...)
    # is not a search's, whatever is added to AskRequest later
    base = req.model_dump(include=set(SearchRequest.model_fields) - {"k"})
    generator = run.chat_model("planner")
    planner: Planner = LLMPlanner(generator) if generator is not None else CoveragePlanner()
    budget = replace(agentic.BUDGET, k=req.k)
    unembedded = 0
    with db.query_connection() as conn:

        def agentic_search(q: str, k: int) -> list[Hit]:
            nonlocal unembedded
            resp = search(SearchRequest.model_validate({**base, "query": q, "k": k}), conn)
            run.reasons.extend(r for r in resp.degraded_reasons if r not in run.reasons)
            run.vector_share = min(run.vector_share, resp.vector_share)
            unembedded = max(unembedded, resp.unembedded_rows)
            return resp.hits

        try:
            result = agentic_loop(agentic_search, planner, req.query, budget)
        except ValueError as exc:  # the planner answered garbage: one plain round, marked degraded
            log.warning("agentic planner failed: %s", exc)
            run.reasons.append(f"planner: {exc}")
            result = LoopResult(
                evidence=agentic_search(req.query, req.k),
                rounds=1,
                searches=1,
                asked=[req.query],
                stop="planner_error",
            )
    run.timings["retrieve"] = elapsed_ms(run.t0)
    run.trace = {
        "agentic": {
            "rounds": result.rounds,
            "searches": result.searches,
            "queries": result.asked,
            "stop": result.stop,
            "evidence": len(result.evidence),
        },
        "retrieved": trace_of(result.evidence),
    }
    run.partial = result.partial
    resp = respond(run, result.evidence)
    resp.unembedded_rows, resp.vectors_complete = unembedded, not unembedded
    return resp
