"""Search, rerank and ask, orchestrated without Celery (tasks and tests call these).

Each stage degrades instead of failing: no query embedding → lexical only; reranker slow or
broken → fused order; generator broken → extractive answer. Every fallback sets ``degraded``
and says why in ``degraded_reasons``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import psycopg

from ragline.query.answer import extractive, grounding, texts, transforms
from ragline.query.answer.agentic import (
    Budget,
    CoveragePlanner,
    LLMPlanner,
    LoopResult,
    Planner,
    Route,
    agentic_loop,
    llm_route,
    route,
)
from ragline.query.answer.citations import build_citations, cited_numbers, claims, invalid_citations
from ragline.query.answer.context import Assembly, assemble, chunk_for, squeeze
from ragline.query.answer.prompt import build_messages, render_squeeze
from ragline.query.answer.sanitize import sanitize_links
from ragline.query.answer.stream import StreamInterrupted, current_publisher, stream_generation
from ragline.query.deadline import DeadlineExceeded, check, run_with_deadline
from ragline.query.question import compared
from ragline.query.retrieval import file_rank
from ragline.query.retrieval.cache import LRU, scoped_key
from ragline.query.retrieval.expand import Expansion
from ragline.query.retrieval.fusion import FusionPolicy
from ragline.query.retrieval.rerank import RerankOutcome, fallback, rerank_hits
from ragline.query.retrieval.retrievers import corpus_plan, document_chunks
from ragline.query.retrieval.search import search as sql_search
from ragline.shared.config.settings import Settings, get_settings
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
                embedder.embed_query, settings.retrieval.query_embed_timeout_s, embedding_form(req.query)
            ),
            dtype=np.float32,
        )
    except DeadlineExceeded:
        log.warning("query embedding exceeded %.1fs, lexical only", settings.retrieval.query_embed_timeout_s)
        reasons.append(f"embedder: timeout after {settings.retrieval.query_embed_timeout_s:g}s")
        return None
    except Exception as exc:  # any provider failure degrades to lexical search
        log.warning("query embedding failed, lexical only: %s", type(exc).__name__)
        reasons.append(f"embedder: {type(exc).__name__}")
        return None
    cache.put(key, vec)
    return vec


# ------------------------------------------------------------------------------------ retrieval
def _without_corpus_names(req: SearchRequest, reasons: list[str]) -> tuple[SearchRequest, list[str]]:
    """The request both lists search with: the question without the names of the collection it
    asks about, within that collection's documents (:mod:`ragline.query.retrieval.terms`). A failed
    statistics statement leaves the question as it is."""
    if req.mode in ("exact", "lexical_code") or not req.groups:
        return req, []
    try:
        with db.query_connection() as conn:
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


def retrieve(req: SearchRequest, limit: int | None = None) -> SearchResponse:
    """Fused candidates (no rerank): ``limit`` of them, default ``req.k``."""
    settings = get_settings()
    t0 = time.perf_counter()
    reasons: list[str] = []
    mode = req.mode
    qvec = None
    req, names = _without_corpus_names(req, reasons)
    if req.query_vector is not None:
        qvec = np.asarray(req.query_vector, dtype=np.float32)
    elif mode in ("hybrid", "vector") and req.groups:
        qvec = _embed_query(req, reasons)
        if qvec is None:
            mode = "lexical"
    t_embed = time.perf_counter()
    # the read-only role that row-level security binds (migration 0007)
    with db.query_connection() as conn:
        resp = sql_search(conn, req.model_copy(update={"mode": mode}), qvec, settings, limit=limit)
    resp.degraded = bool(reasons)
    resp.degraded_reasons = reasons
    resp.corpus_names = names
    resp.timings_ms = {"embed_query": elapsed_ms(t0, t_embed), **resp.timings_ms, "total": elapsed_ms(t0)}
    m.RETRIEVAL_LATENCY_MS.labels(mode=mode).observe(resp.timings_ms["total"])
    for reason in reasons:
        m.QUERY_DEGRADED.labels(reason=reason.split(":", 1)[0]).inc()
    return resp


def _use_rerank(req: SearchRequest, settings: Settings) -> bool:
    if req.mode == "exact":
        return False
    return settings.rerank.provider != "none" if req.rerank is None else req.rerank


def rerank_stage(
    query: str, candidates: list[Hit], top_k: int, threshold: float | None = None
) -> RerankOutcome:
    """Rerank with the configured provider; a provider that cannot even be built degrades too."""
    settings = get_settings()
    threshold = settings.rerank.threshold if threshold is None else threshold
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


def search(req: SearchRequest) -> SearchResponse:
    """Retrieve (and rerank when asked or configured); ``k`` hits."""
    settings = get_settings()
    t0 = time.perf_counter()
    rerank = _use_rerank(req, settings)
    resp = retrieve(req, limit=max(req.k, settings.rerank.candidates) if rerank else req.k)
    if rerank:
        t = time.perf_counter()
        out = rerank_stage(req.query, resp.hits, req.k)
        resp.hits = out.hits
        resp.degraded = resp.degraded or out.degraded
        resp.degraded_reasons += out.reasons
        resp.timings_ms["rerank"] = elapsed_ms(t)
        resp.timings_ms["total"] = elapsed_ms(t0)
    resp.files = file_rank.response_files(resp.hits, req.query, settings)
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
def gather(
    req: SearchRequest, queries: list[str], hyde_vec: np.ndarray | None, limit: int
) -> tuple[list[Hit], bool, list[str], dict[str, float], int, list[str]]:
    """Fused candidates over one or more query variants (multi-query: the variants, each already
    fused, fused by rank under the fusion policy), the rows in scope still without vectors, and
    the collection names the searches left out (``SearchResponse.corpus_names``)."""
    settings = get_settings()
    lists: dict[str, list[Hit]] = {}
    degraded, reasons, timings, unembedded = False, [], {}, 0
    names: list[str] = []
    for i, q in enumerate(queries):
        sub = req.model_copy(
            update={
                "query": q,
                "query_vector": hyde_vec.tolist() if hyde_vec is not None and i == 0 else req.query_vector,
            }
        )
        resp = retrieve(sub, limit=limit)
        lists[str(i)] = resp.hits
        degraded |= resp.degraded
        unembedded = max(unembedded, resp.unembedded_rows)
        names += [n for n in resp.corpus_names if n not in names]
        reasons += [r for r in resp.degraded_reasons if r not in reasons]
        for k, v in resp.timings_ms.items():
            timings[f"retrieve.{k}"] = round(timings.get(f"retrieve.{k}", 0.0) + v, 2)
    if len(lists) == 1:
        return lists["0"], degraded, reasons, timings, unembedded, names
    by_key = {}
    for hits in lists.values():
        for h in hits:
            by_key.setdefault((h.doc_id, h.chunk_no), h)
    fused = FusionPolicy.from_settings(settings).by_rank(
        {name: [(h.doc_id, h.chunk_no) for h in hits] for name, hits in lists.items()}
    )
    out = []
    for key, score in fused[:limit]:
        h = by_key[key].model_copy()
        h.fused_score = h.score = round(score, 8)
        out.append(h)
    return out, degraded, reasons, timings, unembedded, names


@dataclass
class Generated:
    """What the generator answered: the text, why it degraded, its usage for the trace and, for
    the extractive generator, what the answer is made of (its framing and quotes)."""

    text: str
    reasons: list[str] = field(default_factory=list)
    info: dict = field(default_factory=lambda: {"generator": "extractive"})
    extract: extractive.Extract | None = None


def sentence_ranker() -> extractive.Ranker | None:
    """The embedder's similarity of a question to each of a few sentences (the extractive answer to
    a question in another language than its passages), or None when no embedder can be built."""
    try:
        embedder = providers.get_embedder()
    except Exception:
        return None
    timeout_s = get_settings().retrieval.query_embed_timeout_s

    def rank(question: str, sentences: list[str]) -> list[float]:
        q = np.asarray(embedder.embed_query(embedding_form(question)), dtype=np.float32)
        docs = run_with_deadline(
            embedder.embed_documents, 4 * timeout_s, [embedding_form(s) for s in sentences]
        )
        return [float(v) for v in np.asarray(docs, dtype=np.float32) @ q]

    return rank


def _extract(question: str, hits: list[Hit]) -> Generated:
    rank = sentence_ranker()
    tests_layer = get_settings().code.tests_layer
    try:
        ex = extractive.extract(question, hits, rank, tests_layer=tests_layer)
    except Exception as exc:  # the ranker's embedder failed: the answer without it
        log.warning("sentence ranking failed, extractive answer without it: %s", type(exc).__name__)
        ex = extractive.extract(question, hits, tests_layer=tests_layer)
    return Generated(ex.text, extract=ex)


def answer_from(
    question: str, hits: list[Hit], partial: bool = False, order: list[int] | None = None
) -> Generated:
    """The configured generator's answer, extractive on failure."""
    reasons: list[str] = []
    try:
        generator = providers.get_generator()
    except Exception as exc:
        generator = None
        reasons.append(f"generator: {type(exc).__name__}: {exc}")
    if generator is not None:
        system, messages = build_messages(question, hits, partial, order)
        timeout_s = get_settings().answer.timeout_s
        publisher = current_publisher()  # set by the ask task for a request with ``stream``
        try:
            if publisher is not None and hasattr(generator, "stream"):
                g = stream_generation(generator, system, messages, hits, publisher, timeout_s)
            else:
                # bounded by the question's deadline too: past it the extractive answer below is returned
                g = run_with_deadline(generator.generate, timeout_s, system, messages)
            info = {
                "generator": generator.name,
                "input_tokens": g.input_tokens,
                "output_tokens": g.output_tokens,
            }
            return Generated(g.text, reasons, info)
        except StreamInterrupted:  # part of a chat answer was shown: not replaced by another answer
            raise
        except Exception as exc:  # the chat model is down: the offline answer is better than none
            log.warning("generator %s failed, extractive answer: %s", generator.name, type(exc).__name__)
            reasons.append(f"generator: {type(exc).__name__}")
    out = _extract(question, hits)
    out.reasons = reasons
    return out


def validate_answer(answer: str, n_documents: int) -> tuple[str | None, list[int]]:
    """Why an answer must not be returned (None when it may be), and the bad citation numbers."""
    bad = invalid_citations(answer, n_documents)
    if bad:
        return f"invalid citations {bad}: the answer cites documents that were not in the prompt", bad
    if not cited_numbers(answer):
        return "the answer cites no document", []
    return None, []


def is_no_answer(answer: str) -> bool:
    return texts.is_refusal(answer)


def ask(req: AskRequest) -> AskResponse:
    settings = get_settings()
    t0 = time.perf_counter()
    if req.agentic if req.agentic is not None else settings.answer.agentic:
        return agentic_ask(req)
    timings: dict[str, float] = {}
    trace: dict = {}
    reasons: list[str] = []
    plan = transforms.plan_queries(req, reasons)
    decision = _route(plan.queries[0], reasons)
    if decision.route != "simple":
        plan.queries += [q for q in decision.queries if q not in plan.queries]
    trace["router"] = decision.trace()
    timings["transform"] = elapsed_ms(t0)
    if plan.queries != [req.query]:
        trace["queries"] = plan.queries
    if plan.hyde:
        trace["hyde"] = True
    rerank = _use_rerank(req, settings)
    t = time.perf_counter()
    candidates, degraded, r_reasons, r_timings, unembedded, names = gather(
        req, plan.queries, plan.hyde_vec, max(req.k, settings.rerank.candidates) if rerank else req.k
    )
    if names:
        trace["corpus_names"] = names
    reasons += r_reasons
    timings.update(r_timings)
    timings["retrieve"] = elapsed_ms(t)
    trace["retrieved"] = trace_of(candidates)
    t = time.perf_counter()
    if rerank:
        out = rerank_stage(plan.queries[0], candidates, req.k)
        hits = out.hits
        reasons += out.reasons
        timings["rerank"] = elapsed_ms(t)
        trace["reranked"] = trace_of(hits)
    else:
        hits = [h for h in candidates if h.score >= settings.answer.min_score][: req.k]
    hits = _expanded(req, hits, trace, timings)
    empty = "no document passed the relevance threshold"
    if not candidates:  # the caller's groups see nothing that matches (or nothing at all)
        empty = "no document visible to the caller's groups matches the question"
    resp = respond(plan.queries[0], hits, reasons, timings, trace, t0, empty_reason=empty)
    resp.unembedded_rows, resp.vectors_complete = unembedded, not unembedded
    log_query(
        "ask",
        tenant=req.tenant,
        question=req.query,
        latency_ms=resp.timings_ms["total"],
        chunks=len(hits),
        model=settings.answer.provider,
        no_answer=resp.no_answer,
        degraded=resp.degraded,
        rejected_citations=len(trace.get("rejected_citations", [])),
    )
    return resp


def _expanded(req: AskRequest, hits: list[Hit], trace: dict, timings: dict[str, float]) -> list[Hit]:
    """The hits with their sections or documents (``answer.expand``, :mod:`ragline.query.retrieval.expand`);
    the chunks added are in the trace. Reading them failed or timed out: the hits as they were."""
    a = get_settings().answer
    policy = Expansion(req.expand or a.expand, a.expand_hits, a.expand_chunks)
    docs = policy.documents(hits)
    if not docs:
        return hits
    t = time.perf_counter()
    try:
        with db.query_connection() as conn:
            chunks = document_chunks(conn, req, docs, get_settings(), 50 * len(docs))
    except psycopg.errors.QueryCanceled:
        return hits
    out = policy.expand(hits, chunks)
    found = {(h.doc_id, h.chunk_no) for h in hits}
    added = [[h.doc_id, h.chunk_no] for h in out if (h.doc_id, h.chunk_no) not in found]
    trace["expanded"] = {"mode": policy.mode, "added": added}
    timings["expand"] = elapsed_ms(t)
    return out


def respond(
    question: str,
    hits: list[Hit],
    reasons: list[str],
    timings: dict[str, float],
    trace: dict,
    t0: float,
    partial: bool = False,
    empty_reason: str = "no document passed the relevance threshold",
) -> AskResponse:
    """Assemble the context, generate, validate citations, check groundedness and confidence, build
    the response (shared by the plain and the agentic path). Every text ragline writes itself
    (refusals, framing) is in the question's language (query/answer/texts.py)."""
    a = get_settings().answer
    lang = texts.language_of(question)
    refusal = texts.no_answer(lang)

    def done(**kw) -> AskResponse:
        timings["total"] = elapsed_ms(t0)
        return AskResponse(
            degraded=bool(reasons),
            degraded_reasons=reasons,
            timings_ms=timings,
            trace=trace,
            partial=partial,
            **kw,
        )

    if not hits:
        m.EMPTY_CONTEXT.inc()
        return done(answer=refusal, citations=[], no_answer=True, reason=empty_reason)
    chat = _chat_call()
    asm = _context_stage(question, hits, chat, reasons, timings, trace)
    hits = asm.hits()  # one per passage: [N] names passage N
    t = time.perf_counter()
    try:
        gen = answer_from(question, hits, partial, asm.order)
    except StreamInterrupted as exc:  # the reader saw part of an answer that broke off: retracted
        reasons.append(f"generator: {exc}")
        said = texts.say("interrupted", lang, why=str(exc))
        return done(answer=said, citations=[], no_answer=True, reason=reasons[-1])
    answer, info, ex = gen.text, gen.info, gen.extract
    reasons += gen.reasons
    if ex is not None:
        trace["extractive"] = {"kind": ex.kind, "quoted": sorted({n for n, _ in ex.quoted})}
    timings["generate"] = elapsed_ms(t)
    m.GENERATION_LATENCY_MS.labels(generator=info["generator"]).observe(timings["generate"])
    trace["generator"] = info
    if chat is not None and a.self_consistency > 1 and info["generator"] != "extractive":
        answer = _self_consistency(question, hits, partial, asm, answer, info, timings, trace)
    if is_no_answer(answer) and not cited_numbers(answer):
        return done(answer=refusal, citations=[], no_answer=True, reason="the generator found no answer")
    # links and images only to URLs the cited documents contain (a poisoned document cannot make
    # a chat UI fetch its URL); the URLs themselves may carry secrets, so only their count is logged
    cited = [hits[n - 1].content for n in cited_numbers(answer) if 1 <= n <= len(hits)]
    answer, removed = sanitize_links(answer, cited)
    if removed:
        log.warning("answer: %d link(s) to URLs not in the cited documents removed", len(removed))
    why, bad = validate_answer(answer, len(hits))
    if why:
        log.warning("answer rejected (%s); %d chars not returned", why, len(answer))
        if bad:
            m.INVALID_CITATIONS.inc()
            trace["rejected_citations"] = bad
        return done(answer=texts.say("rejected", lang, why=why), citations=[], no_answer=True, reason=why)
    framing = ex.framing if ex is not None else []
    g = _grounding_stage(answer, asm, info["generator"], chat, reasons, timings, trace, framing)
    if g is not None and g.removed:
        too_many = 1 - g.support > a.max_unsupported_share or not cited_numbers(g.answer)
        m.UNGROUNDED_ANSWERS.labels(judge=g.judge, outcome="no_answer" if too_many else "trimmed").inc()
        if too_many:
            why = (
                f"{len(g.removed)} of {len(g.claims)} sentences are not supported by the documents they cite"
            )
            return done(answer=refusal, citations=[], no_answer=True, reason=why, removed_sentences=g.removed)
        answer = g.answer
    cited = [asm.passages[n - 1].as_hit(full=True) for n in cited_numbers(answer)]
    conf, judged = _confidence(question, ex, g, cited, hits, trace)
    removed_sentences = g.removed if g else []
    if conf is not None and judged and conf < a.min_confidence:
        m.LOW_CONFIDENCE_ANSWERS.inc()
        why = f"confidence {conf:.2f} is below the minimum {a.min_confidence:g}"
        return done(
            answer=refusal,
            citations=[],
            no_answer=True,
            reason=why,
            confidence=conf,
            removed_sentences=removed_sentences,
        )
    if conf is not None:
        m.ANSWER_CONFIDENCE.observe(conf)
    said = claims(answer)  # a merged passage's citation names the chunk holding what was said
    cite_hits = [chunk_for(p, said.get(p.n, [])) for p in asm.passages]
    return done(
        answer=answer,
        citations=build_citations(answer, cite_hits),
        no_answer=False,
        removed_links=removed,
        confidence=conf,
        removed_sentences=removed_sentences,
    )


def _route(question: str, reasons: list[str]) -> Route:
    """The complexity router (query/answer/agentic.py ``route``): rules decide whether a question needs
    more than one search; with a chat generator configured (``answer.decompose`` auto) the chat
    model writes the sub-queries of a question the rules found complex."""
    mode = get_settings().answer.decompose
    if mode == "off":
        return Route("simple", why="decomposition off")
    rules = route(question, compared(question))
    if mode == "rules" or rules.route == "simple":
        return rules
    try:
        generator = providers.get_generator()
        return rules if generator is None else llm_route(generator, question, rules)
    except Exception as exc:  # the chat model failed: the rules' sub-queries
        reasons.append(f"router: {type(exc).__name__}")
        return rules


def _confidence(question, ex, g, cited, hits, trace) -> tuple[float | None, bool]:
    """(the answer's confidence, whether it may withhold the answer), recorded in the trace."""
    a = get_settings().answer
    if ex is not None:
        # an extractive answer only quotes (its support is 1.0 by construction): how far to trust
        # it is how well what it quoted answers the question
        rel = grounding.extractive_relevance(
            question, ex.quoted, hits, ex.kind == "definition", trace.get("corpus_names", ())
        )
        trace["confidence"] = {**rel.trace(), "min": a.min_confidence, "judged": True}
        return rel.confidence, True
    signal = grounding.retrieval_signal(question, cited)
    conf = grounding.confidence(signal, g.support if g else None)
    # withheld only on evidence: a groundedness result or a reranker's scores; the share of the
    # question's words in the passages alone is reported, not trusted to refuse (a paraphrase shares few)
    judged = g is not None or any(h.rerank_score is not None for h in cited)
    trace["confidence"] = {
        "retrieval": None if signal is None else round(signal, 3),
        "support": round(g.support, 3) if g else None,
        "confidence": conf,
        "min": a.min_confidence,
        "judged": judged,
    }
    return conf, judged


# ------------------------------------------------------------------- answer stages (grounded answers)
def _chat_call():
    """``call(system, messages) -> text`` on the configured chat generator under the question's
    deadline, or None for the extractive generator (or one that cannot be built)."""
    try:
        generator = providers.get_generator()
    except Exception:  # answer_from records why and answers extractively
        return None
    if generator is None:
        return None
    timeout = get_settings().answer.timeout_s

    def call(system: str, messages: list[dict]) -> str:
        return run_with_deadline(generator.generate, timeout, system, messages).text

    return call


def _context_stage(question, hits, chat, reasons, timings, trace) -> Assembly:
    """Merge, budget, order (and squeeze) the passages the generator reads (query/answer/context.py)."""
    a = get_settings().answer
    t = time.perf_counter()
    # the extractive generator ranks sentences by their chunk's rank: it reads the chunks unmerged
    # (merged, "Что такое Suspense?" of tests/integration/test_answers_ru_docs.py lost its definition)
    merge = a.context_merge and chat is not None
    asm = assemble(hits, a.context_budget_tokens.get(a.provider, 0), merge, a.context_reorder)
    timings["context"] = elapsed_ms(t)
    if chat is not None and a.context_squeeze:
        check("squeezing the context")
        t = time.perf_counter()
        n, errors = squeeze(asm, question, chat, a.squeeze_min_tokens, render_squeeze)
        reasons += errors
        timings["squeeze"] = elapsed_ms(t)
        m.ANSWER_STAGE_LATENCY_MS.labels(stage="squeeze").observe(timings["squeeze"])
    m.ANSWER_STAGE_LATENCY_MS.labels(stage="context").observe(timings["context"])
    m.CONTEXT_MERGED_CHUNKS.inc(asm.merged)
    m.CONTEXT_DROPPED_CHUNKS.inc(len(asm.dropped))
    trace["context"] = asm.trace()
    trace["answer_documents"] = [
        {"n": p.n, "doc_id": p.doc_id, "chunk_no": p.hits[0].chunk_no, "chunks": [h.chunk_no for h in p.hits]}
        for p in asm.passages
    ]
    return asm


def _self_consistency(question, hits, partial, asm, first, info, timings, trace) -> str:
    """Sample more answers, keep the one agreeing most with the others (cited documents, claims)."""
    a = get_settings().answer
    check("self-consistency")
    t = time.perf_counter()
    samples, failed = [first], 0
    for _ in range(a.self_consistency - 1):
        more_gen = answer_from(question, hits, partial, asm.order)
        text, errors, more = more_gen.text, more_gen.reasons, more_gen.info
        if errors or more["generator"] == "extractive":  # a failed sample is not a vote
            failed += 1
            continue
        samples.append(text)
        info["input_tokens"] = info.get("input_tokens", 0) + more.get("input_tokens", 0)
        info["output_tokens"] = info.get("output_tokens", 0) + more.get("output_tokens", 0)
    n = len(asm.passages)
    best, agree = grounding.most_consistent(
        samples, lambda k: asm.passages[k - 1].doc_id if 1 <= k <= n else ""
    )
    timings["self_consistency"] = elapsed_ms(t)
    m.ANSWER_STAGE_LATENCY_MS.labels(stage="self_consistency").observe(timings["self_consistency"])
    trace["self_consistency"] = {
        "samples": len(samples),
        "failed": failed,
        "chosen": best,
        "agreement": agree,
        "extra_calls": a.self_consistency - 1,
    }
    return samples[best]


def _judge(mode: str, generator: str) -> str | None:
    if mode == "off":
        return None
    if generator == "extractive":
        return "structural"
    return None if mode == "auto" else mode


def _grounding_stage(
    answer, asm, generator, chat, reasons, timings, trace, framing=()
) -> grounding.Grounding | None:
    """Check every sentence against the passages it cites (query/answer/grounding.py); None when off."""
    a = get_settings().answer
    judge = _judge(a.grounding, generator)
    if judge is None:
        return None
    passages = [p.text for p in asm.passages]
    t = time.perf_counter()
    try:
        g = grounding.check(answer, passages, judge, a.grounding_min_share, chat, framing)
    except Exception as exc:  # the judge failed or answered garbage: the offline judge still checks
        log.warning("groundedness judge failed, lexical check: %s", exc)
        reasons.append(f"grounding: {type(exc).__name__}: {exc}"[:200])
        g = grounding.check(answer, passages, "lexical", a.grounding_min_share, framing=framing)
    timings["grounding"] = elapsed_ms(t)
    m.ANSWER_STAGE_LATENCY_MS.labels(stage="grounding").observe(timings["grounding"])
    if g.removed:
        m.UNGROUNDED_SENTENCES.labels(judge=g.judge).inc(len(g.removed))
    trace["grounding"] = g.trace()
    return g


def agentic_ask(req: AskRequest) -> AskResponse:
    """Search, judge, search again within the budget (``agentic``), then answer from the evidence."""
    settings = get_settings()
    t0 = time.perf_counter()
    reasons: list[str] = []
    timings: dict[str, float] = {}
    # the question's search fields only: a field only asks have (history, agentic, stream, expand, ...)
    # is not a search's, whatever is added to AskRequest later
    base = req.model_dump(include=set(SearchRequest.model_fields) - {"k"})

    def agentic_search(q: str, k: int) -> list[Hit]:
        resp = search(SearchRequest.model_validate({**base, "query": q, "k": k}))
        reasons.extend(r for r in resp.degraded_reasons if r not in reasons)
        return resp.hits

    try:
        generator = providers.get_generator()
    except Exception as exc:
        generator = None
        reasons.append(f"planner: {type(exc).__name__}")
    planner: Planner = LLMPlanner(generator) if generator is not None else CoveragePlanner()
    budget = Budget(
        settings.answer.agentic_max_rounds,
        settings.answer.agentic_max_searches,
        settings.answer.agentic_max_evidence,
        req.k,
    )
    try:
        result = agentic_loop(agentic_search, planner, req.query, budget)
    except ValueError as exc:  # the planner answered garbage: one plain round, marked degraded
        log.warning("agentic planner failed: %s", exc)
        reasons.append(f"planner: {exc}")
        result = LoopResult(
            evidence=agentic_search(req.query, req.k),
            rounds=1,
            searches=1,
            asked=[req.query],
            stop="planner_error",
        )
    timings["retrieve"] = elapsed_ms(t0)
    trace = {
        "agentic": {
            "rounds": result.rounds,
            "searches": result.searches,
            "queries": result.asked,
            "stop": result.stop,
            "evidence": len(result.evidence),
        },
        "retrieved": trace_of(result.evidence),
    }
    return respond(req.query, result.evidence, reasons, timings, trace, t0, partial=result.partial)
