"""Search and ask, orchestrated without Celery (tasks and tests call these)."""

from __future__ import annotations

import logging
import time

import numpy as np

from query import generate
from query.citations import invalid_citations
from query.retrieve import search as sql_search
from shared import db
from shared import metrics as m
from shared.contracts import AskRequest, AskResponse, Citation, SearchRequest, SearchResponse
from shared.logging_setup import log_query
from shared.providers import get_embedder
from shared.settings import get_settings

log = logging.getLogger(__name__)


def _embed_query(text: str, reasons: list[str]) -> np.ndarray | None:
    try:
        return np.asarray(get_embedder().embed_query(text), dtype=np.float32)
    except Exception as exc:  # any provider failure degrades to lexical search
        log.warning("query embedding failed, lexical only: %s", type(exc).__name__)
        reasons.append(f"embedder: {type(exc).__name__}")
        return None


def search(req: SearchRequest) -> SearchResponse:
    settings = get_settings()
    t0 = time.perf_counter()
    reasons: list[str] = []
    if req.query_vector is not None:
        qvec = np.asarray(req.query_vector, dtype=np.float32)
    else:
        qvec = _embed_query(req.query, reasons) if req.mode in ("hybrid", "vector") and req.groups else None
    t_embed = time.perf_counter()
    mode = req.mode
    if qvec is None and mode != "lexical" and reasons:
        mode = "lexical"
    with db.connection() as conn:
        resp = sql_search(conn, req.model_copy(update={"mode": mode}), qvec, settings)
    resp.degraded = bool(reasons)
    resp.degraded_reasons = reasons
    resp.timings_ms = {"embed_query": round((t_embed - t0) * 1000, 2), **resp.timings_ms,
                       "total": round((time.perf_counter() - t0) * 1000, 2)}
    m.RETRIEVAL_LATENCY_MS.labels(mode=mode).observe(resp.timings_ms["total"])
    m.RETRIEVED_CHUNKS.observe(len(resp.hits))
    for reason in reasons:
        m.QUERY_DEGRADED.labels(reason=reason.split(":", 1)[0]).inc()
    log_query("search", tenant=req.tenant, question=req.query, latency_ms=resp.timings_ms["total"],
              chunks=len(resp.hits), model=settings.embed_model_name, mode=mode, degraded=resp.degraded)
    return resp


def ask(req: AskRequest) -> AskResponse:
    settings = get_settings()
    t0 = time.perf_counter()
    found = search(SearchRequest(query=req.query, tenant=req.tenant, groups=req.groups,
                                 k=max(req.k, settings.answer_top_k), mode=req.mode))
    hits = [h for h in found.hits if h.score >= settings.answer_min_score][: req.k]
    t_retrieve = time.perf_counter()
    answer = generate.extractive_answer(req.query, hits) if hits else generate.NO_ANSWER
    t_generate = time.perf_counter()
    m.GENERATION_LATENCY_MS.labels(generator=settings.generator).observe((t_generate - t_retrieve) * 1000)
    if not hits:
        m.EMPTY_CONTEXT.inc()
    bad = invalid_citations(answer, len(hits))
    log_query("ask", tenant=req.tenant, question=req.query, latency_ms=(t_generate - t0) * 1000, chunks=len(hits),
              model=settings.generator, rejected_citations=len(bad))
    trace = {"retrieved": [{"doc_id": h.doc_id, "chunk_no": h.chunk_no, "score": h.score,
                            "vector_rank": h.vector_rank, "lexical_rank": h.lexical_rank} for h in found.hits]}
    if bad:
        log.warning("answer rejected: invalid citations %s", bad)
        m.INVALID_CITATIONS.inc()
        trace["rejected_citations"] = bad
        answer = f"Ответ отклонён: ссылки {bad} не указывают на найденные документы."
        return AskResponse(answer=answer, citations=[], no_answer=True, degraded=found.degraded, trace=trace,
                           timings_ms={"retrieve": round((t_retrieve - t0) * 1000, 2)})
    no_answer = answer == generate.NO_ANSWER
    from query.citations import cited_numbers

    citations = [Citation(n=n, doc_id=hits[n - 1].doc_id, chunk_no=hits[n - 1].chunk_no,
                          heading=hits[n - 1].heading, path=hits[n - 1].path) for n in cited_numbers(answer)]
    return AskResponse(
        answer=answer, citations=citations, no_answer=no_answer, degraded=found.degraded, trace=trace,
        timings_ms={**{f"retrieve.{k}": v for k, v in found.timings_ms.items()},
                    "retrieve": round((t_retrieve - t0) * 1000, 2),
                    "generate": round((t_generate - t_retrieve) * 1000, 2),
                    "total": round((time.perf_counter() - t0) * 1000, 2)},
    )
