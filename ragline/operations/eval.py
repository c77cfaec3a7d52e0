"""Retrieval-quality evaluation: recall@k, MRR@k, nDCG@k (graded) and fail@20 over a golden set.

The corpus goes through the real ingestion pipeline and workers into a fresh tenant (the
embedding cache makes a rerun cheap); every query goes through the real retrieval task.
The metric formulas follow the reference evaluation script: gain ``2^rel - 1``, discount
``1/log2(i + 1)``, IDCG over every known relevant document (a miss is penalised).
"""

from __future__ import annotations

import json
import math
import statistics
import time
import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ragline.query.retrieval.fusion import PROSE, FusionPolicy, hybrid_inputs
from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT, TASK_QUERY_RETRIEVE

EVAL_GROUP = "eval"
FAIL_AT = 20


# ------------------------------------------------------------------------------------------ data
def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def grades(relevant: dict | list) -> dict[str, int]:
    """``{"id": grade}`` as given (grade 0 = judged not relevant, dropped); a list means grade 1 for each id."""
    if isinstance(relevant, dict):
        return {str(k): int(v) for k, v in relevant.items() if int(v) > 0}
    return {str(d): 1 for d in relevant}


def corpus_payloads(corpus: Iterable[dict], tenant: str, job_id: str | None = None) -> list[dict]:
    """One ingest payload per corpus line ``{"id", "title", "text"}``; the doc_id is ``id``."""
    out = []
    for row in corpus:
        title = (row.get("title") or "").strip()
        text = str(row["text"])
        out.append(
            {
                "tenant": tenant,
                "doc_id": str(row["id"]),
                "content": f"{title}\n\n{text}" if title else text,
                "fmt": "text",
                "path": str(row["id"]),
                "acl": [EVAL_GROUP],
                "job_id": job_id,
            }
        )
    return out


# --------------------------------------------------------------------------------------- metrics
def doc_ranking(hit_doc_ids: Iterable[str]) -> list[str]:
    """Hits (chunks) mapped to documents (or files); the first occurrence of each counts."""
    return list(dict.fromkeys(hit_doc_ids))


def recall_at_k(found: list[str], rel: Collection[str], k: int) -> float:
    """The share of the relevant documents (a grade map's keys, or any collection) in the first ``k``."""
    return len(set(found[:k]) & set(rel)) / len(rel) if rel else 0.0


def reciprocal_rank(found: list[str], rel: Collection[str], k: int | None = None) -> float:
    """1 / the rank of the first relevant document within the first ``k`` (all: ``None``), else 0."""
    return next((1 / i for i, doc in enumerate(found[:k], start=1) if doc in rel), 0.0)


def ndcg_at_k(found: list[str], rel: dict[str, int], k: int) -> float:
    dcg = sum((2 ** rel.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(found[:k]))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


@dataclass
class ModeReport:
    mode: str
    k: int
    recall: list[float] = field(default_factory=list)
    rr: list[float] = field(default_factory=list)
    ndcg: list[float] = field(default_factory=list)
    failed: list[bool] = field(default_factory=list)
    degraded: int = 0
    misses: list[dict] = field(default_factory=list)

    def add(self, query: str, found: list[str], rel: dict[str, int]) -> None:
        self.recall.append(recall_at_k(found, rel, self.k))
        self.rr.append(reciprocal_rank(found, rel, self.k))
        self.ndcg.append(ndcg_at_k(found, rel, self.k))
        self.failed.append(not set(found[:FAIL_AT]) & rel.keys())
        if self.recall[-1] == 0:
            self.misses.append({"query": query, "relevant": sorted(rel), "top": found[:3]})

    def summary(self) -> dict:
        k = self.k
        mean = lambda xs: round(statistics.fmean(xs), 4) if xs else 0.0  # noqa: E731
        return {
            f"recall@{k}": mean(self.recall),
            f"mrr@{k}": mean(self.rr),
            f"ndcg@{k}": mean(self.ndcg),
            f"fail@{FAIL_AT}": mean([float(f) for f in self.failed]),
            "n": len(self.recall),
            "degraded": self.degraded,
        }


SearchFn = Callable[[str, str, int], dict]  # (query, mode, k) -> SearchResponse as dict


def evaluate(
    queries: list[dict], search: SearchFn, modes: list[str], k: int = 10, depth: int = 50
) -> dict[str, ModeReport]:
    """Run every query in every mode. ``depth`` chunks are fetched (default: the retriever's top-N)
    so that after mapping chunks to documents there are still ``k`` and ``FAIL_AT`` documents."""
    reports = {m: ModeReport(m, k) for m in modes}
    depth = max(depth, k, FAIL_AT)
    for row in queries:
        rel = grades(row["relevant"])
        for mode in modes:
            res = search(row["query"], mode, depth)
            if res.get("ok") is False:
                raise RuntimeError(f"retrieval failed for {row['query']!r}: {res}")
            reports[mode].degraded += int(bool(res.get("degraded")))
            reports[mode].add(row["query"], doc_ranking(h["doc_id"] for h in res["hits"]), rel)
    return reports


def sweep_rrf(
    queries: list[dict],
    search: SearchFn,
    weights: list[tuple[float, float]],
    k: int = 10,
    rrf_k: int = 60,
    top_n: int = 50,
    cross_script_weight: float | None = None,
    runs: list[tuple[dict, dict]] | None = None,
) -> list[dict]:
    """Hybrid metrics for several (vector, lexical) RRF weight pairs without restarting workers.

    The vector-only and lexical-only runs at depth ``top_n`` (the search's ``LIST_DEPTH``) return
    exactly the two candidate lists a hybrid search fuses, so each weight pair is scored by the
    retriever's own :meth:`ragline.query.retrieval.fusion.FusionPolicy.hybrid` (method ``rrf``), script check
    included; ``None`` for ``cross_script_weight`` leaves the lexical weight as given (no script
    check). ``cross_script`` in each row counts the questions whose lexical weight the check lowered.
    ``runs``: the lists of :func:`candidate_lists`, when the caller already has them.
    """
    prepared = []
    for row, hits in runs or candidate_lists(queries, search, top_n):
        vector, lexical = _rows(hits["vector"]), _rows(hits["lexical"])
        prepared.append((row, *hybrid_inputs(vector, lexical)))
    out = []
    for wv, wl in weights:
        policy = FusionPolicy(
            method="rrf",
            rrf_k=rrf_k,
            vector_weight=wv,
            lexical_weight=wl,
            cross_script_weight=cross_script_weight,
        )
        rep = ModeReport(f"hybrid wv={wv:g} wl={wl:g}", k)
        lowered = 0
        for row, vector, lexical, passages in prepared:
            lowered += policy.lexical_weight_for(row["query"], passages if lexical else []) < wl
            fused = policy.hybrid(row["query"], vector, lexical, passages)
            rep.add(row["query"], doc_ranking(key[0] for key, _ in fused), grades(row["relevant"]))
        out.append(
            {"rrf_weight_vector": wv, "rrf_weight_lexical": wl, **rep.summary(), "cross_script": lowered}
        )
    return out


def candidate_lists(queries: list[dict], search: SearchFn, top_n: int = 50) -> list[tuple[dict, dict]]:
    """Each question with its vector-only and lexical-only hits at depth ``top_n``: exactly the
    two lists a hybrid search fuses."""
    out = []
    for row in queries:
        hits = {}
        for mode in ("vector", "lexical"):
            res = search(row["query"], mode, top_n)
            if res.get("ok") is False:
                raise RuntimeError(f"retrieval failed for {row['query']!r}: {res}")
            hits[mode] = res["hits"]
        out.append((row, hits))
    return out


def best_single_list(runs: list[tuple[dict, dict]], k: int = 10) -> dict:
    """The ceiling of choosing between the two lists: per question, with hindsight, whichever of the
    vector and lexical lists ranks its documents better (nDCG@k; a question is missed at
    ``FAIL_AT`` only when both lists miss it). A fusion of the two rarely does much better, so a
    target above this needs another signal than these lists."""
    ndcg, failed = [], 0
    for row, hits in runs:
        rel = grades(row["relevant"])
        found = [doc_ranking(h["doc_id"] for h in hits[mode]) for mode in ("vector", "lexical")]
        ndcg.append(max(ndcg_at_k(f, rel, k) for f in found))
        failed += all(not set(f[:FAIL_AT]) & rel.keys() for f in found)
    return {
        f"ndcg@{k}": round(statistics.fmean(ndcg), 4) if ndcg else 0.0,
        f"fail@{FAIL_AT}": round(failed / len(ndcg), 4) if ndcg else 0.0,
        "n": len(ndcg),
    }


#: the prose fusions a sweep scores beside the RRF weights (fields of
#: :class:`~ragline.query.retrieval.fusion.FusionPolicy`): each normalisation at several lexical shares
FUSION_GRID: list[dict] = [
    {"method": "convex", "normalization": norm, "convex_lexical": w}
    for norm in ("minmax", "zscore", "dbsf")
    for w in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
]


def _rows(hits: list[dict]) -> list[dict]:
    """Hits of a single-mode search as the candidate rows :meth:`~ragline.query.retrieval.ranking.RankingPolicy.fused_keys`
    reads (its score fields)."""
    return [
        {
            "doc_id": h["doc_id"],
            "chunk_no": h["chunk_no"],
            "content": h.get("content", ""),
            "distance": h.get("vector_distance") if h.get("vector_distance") is not None else 1.0,
            "rank": h.get("lexical_score") or 0.0,
        }
        for h in hits
    ]


def sweep_fusion(
    queries: list[dict],
    search: SearchFn,
    variants: list[dict],
    settings: Settings,
    k: int = 10,
    runs: list[tuple[dict, dict]] | None = None,
) -> list[dict]:
    """Hybrid metrics for several prose fusions (fields of the prose
    :class:`~ragline.query.retrieval.fusion.FusionPolicy` replaced, such as
    ``{"method": "convex", "normalization": "zscore", "convex_lexical": 0.3}``), recomputed from one
    run's vector and lexical lists with the retriever's own
    :meth:`ragline.query.retrieval.ranking.RankingPolicy.fused_keys`, script check included."""
    from ragline.query.retrieval.ranking import RankingPolicy  # psycopg and numpy: only when sweeping
    from ragline.query.retrieval.search import LIST_DEPTH

    runs = runs or candidate_lists(queries, search, LIST_DEPTH)
    out = []
    for overrides in variants:
        prose = replace(FusionPolicy.from_settings(settings), **overrides)
        rep = ModeReport("hybrid " + " ".join(f"{a}={b}" for a, b in overrides.items()), k)
        for row, hits in runs:
            policy = replace(RankingPolicy.for_question(row["query"], settings), prose=prose)
            fused = policy.fused_keys(_rows(hits["vector"]), _rows(hits["lexical"]))
            rep.add(row["query"], doc_ranking(key[0] for key, _ in fused), grades(row["relevant"]))
        out.append({**overrides, **rep.summary()})
    return out


# ------------------------------------------------------------------------------- stack plumbing
def ingest_corpus(
    corpus: list[dict], tenant: str, timeout: float = 3600.0, progress: Callable[[dict], None] | None = None
) -> dict:
    """Send the corpus through the ingest queue under one job and wait for it to finish."""
    from ragline.shared.worker import db, jobs  # start-up: Celery and psycopg load only for an eval run
    from ragline.shared.worker.celery_app import app

    ids = [str(r["id"]) for r in corpus]
    with db.connection() as conn:
        job_id = jobs.create_job(conn, "ingest", tenant, ids, {"eval": True, "documents": len(ids)})
    for payload in corpus_payloads(corpus, tenant, job_id):
        app.send_task(TASK_INGEST_DOCUMENT, args=[payload])
    deadline = time.monotonic() + timeout
    while True:
        with db.connection() as conn:
            summary = jobs.job_summary(conn, job_id)
        if progress:
            progress(summary)
        if summary["state"] != "running":
            return summary
        if time.monotonic() > deadline:
            raise TimeoutError(f"ingest job {job_id} still running after {timeout:.0f}s")
        time.sleep(0.5)


def task_search(tenant: str, rerank: bool = False, timeout: float = 120.0) -> SearchFn:
    """A search function that goes through the real ``ragline.query.retrieve`` task."""

    def run(query: str, mode: str, k: int) -> dict:
        payload = {
            "query": query,
            "tenant": tenant,
            "groups": [EVAL_GROUP],
            "k": k,
            "mode": mode,
            "rerank": rerank,
        }
        return retrieve(payload, timeout)

    return run


def retrieve(payload: dict, timeout: float) -> dict:
    """One search through the real ``ragline.query.retrieve`` task; a failed one raises."""
    from ragline.shared.worker.celery_app import app

    res = app.send_task(TASK_QUERY_RETRIEVE, args=[payload]).get(timeout=timeout)
    if res.get("ok") is False:
        raise RuntimeError(f"retrieval failed for {payload['query']!r}: {res}")
    return res


def drop_tenant(tenant: str) -> None:
    from ragline.shared.worker import db

    with db.connection() as conn:
        conn.execute("DELETE FROM documents WHERE tenant = %s", (tenant,))


def fresh_tenant() -> str:
    return f"eval-{uuid.uuid4().hex[:12]}"


def run_eval(
    queries_path: Path,
    corpus_path: Path,
    k: int = 10,
    modes: list[str] | None = None,
    rerank: bool = False,
    keep: bool = False,
    sweep: list[tuple[float, float]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Ingest into a fresh tenant, evaluate every mode, drop the tenant (unless ``keep``)."""
    from ragline.query.retrieval.search import LIST_DEPTH  # psycopg and numpy: only for an eval run

    settings = get_settings()
    modes = modes or ["hybrid"]
    queries = read_jsonl(queries_path)
    corpus = read_jsonl(corpus_path)
    tenant = fresh_tenant()
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    try:
        summary = ingest_corpus(corpus, tenant)
        say(
            f"ingested {summary['documents']} documents, {summary['chunks']} chunks "
            f"({summary['embedded']} embedded, {summary['failed']} failed) in {time.perf_counter() - t0:.0f}s"
        )
        t1 = time.perf_counter()
        search = task_search(tenant, rerank=rerank)
        reports = evaluate(queries, search, modes, k, depth=LIST_DEPTH)
        say(f"{len(queries)} queries x {len(modes)} mode(s) in {time.perf_counter() - t1:.0f}s")
        result: dict = {m: {**r.summary(), "misses": r.misses} for m, r in reports.items()}
        meta = {
            "queries": str(queries_path),
            "corpus": str(corpus_path),
            "k": k,
            "rerank": rerank,
            "reranker": settings.rerank.provider if rerank else None,
            "tenant": tenant,
            "embedder": settings.embed.model_name,
            "rrf_weight_vector": PROSE.vector_weight,
            "rrf_weight_lexical": PROSE.lexical_weight,
            "rrf_weight_lexical_cross_script": PROSE.cross_script_weight,
            "rrf_k": PROSE.rrf_k,
            "lexical_rank": settings.lexical.rank,
            "fusion": settings.fusion.method,
            "fusion_normalization": PROSE.normalization,
            "convex_weight_lexical": PROSE.convex_lexical,
            "retrieval_top_n": LIST_DEPTH,
            "ingest": {k_: summary[k_] for k_ in ("documents", "chunks", "embedded", "failed")},
            "failed_documents": [e["doc_id"] for e in summary["errors"]],
        }
        if sweep:
            runs = candidate_lists(queries, search, LIST_DEPTH)
            meta["rrf_sweep"] = sweep_rrf(
                queries,
                search,
                sweep,
                k,
                PROSE.rrf_k,
                LIST_DEPTH,
                PROSE.cross_script_weight,
                runs,
            )
            meta["fusion_sweep"] = sweep_fusion(
                queries, search, [{"method": "rrf"}, *FUSION_GRID], settings, k, runs
            )
            meta["best_single_list"] = best_single_list(runs, k)
        return {"modes": result, "meta": meta}
    finally:
        if not keep:
            drop_tenant(tenant)
