"""What the lexical statement costs on one large tenant, by ranking function: ``ts_rank`` (the
default) against BM25 (``RAGLINE_LEXICAL_RANK=bm25``, migration 0009).

    python -m bench.lexical_cost [N_CHUNKS]    # writes bench/results/lexical_cost.json

One tenant of N real Russian passages (tydi-ru-dev, cycled) loaded as chunks; the first 20 tydi-ru-dev
questions sent through the retrieval task's own lexical statement (``lexical_rows``, OR-ed terms as
the task sends them) as the query pool's role, each ranking function in turn per question, twice.
BM25 scores every row the tsquery matches (its terms' frequencies are unnested from each matched
row's tsvector), so its cost grows with the matched rows; ``ts_rank`` only ranks them. Not part of
``make bench``: it has no target, it is the measurement behind the default.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

from bench import common
from bench.synthetic import load_chunks

NAME = "lexical_cost"
QUESTIONS = common.CORPUS.parent / "dev.jsonl"


def run(n_chunks: int = 100_000, n_questions: int = 20, repeats: int = 2) -> dict:
    from ragline.query.retrieval import retrievers
    from ragline.query.retrieval.filters import lexical_query
    from ragline.query.retrieval.retrievers import lexical_rows
    from ragline.query.retrieval.transaction import read_only_transaction, set_transaction_params
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.contracts import SearchRequest
    from ragline.shared.worker import db

    tenant = "lexical-cost"
    texts = common.passages(min(n_chunks, 5000))
    with db.connect() as conn:
        with conn.transaction():
            load_chunks(conn, tenant, np.zeros((n_chunks, 384), dtype=np.float32), ["g"], texts=texts)
        conn.execute("VACUUM (ANALYZE) chunks")
    questions = [
        json.loads(line)["query"] for line in QUESTIONS.read_text(encoding="utf-8").splitlines()[:n_questions]
    ]
    base = get_settings()
    times: dict[str, list[float]] = {"ts_rank": [], "bm25": []}
    matched: list[int] = []
    for q in questions:
        req = SearchRequest(query=q, tenant=tenant, groups=["g"], k=10, mode="lexical")
        with db.connection() as conn:
            tsq = lexical_query(q, retrievers.MATCH, base.lexical.max_terms)
            matched.append(
                conn.execute(
                    "SELECT count(*) AS n FROM chunks WHERE tenant = %s AND tsv @@ websearch_to_tsquery('russian', %s)",
                    (tenant, tsq),
                ).fetchone()["n"]
            )
        for _ in range(repeats):
            for rank in ("ts_rank", "bm25"):
                settings = base.overridden(lexical_rank=rank, deadlines_statement_timeout_ms=0)
                t = time.perf_counter()
                with db.query_connection() as conn, read_only_transaction(conn):
                    set_transaction_params(conn, req, settings, 50)
                    lexical_rows(conn, req, 50, settings)
                times[rank].append((time.perf_counter() - t) * 1000)
    out = {
        "benchmark": NAME,
        "params": {"n_chunks": n_chunks, "questions": len(questions), "repeats": repeats},
        "matched_rows": {"median": statistics.median(matched), "max": max(matched)},
        "latency_ms": {k: common.latency_summary(v) for k, v in times.items()},
        "machine": common.machine(),
    }
    limit = base.deadlines.statement_timeout_ms
    out["over_default_statement_timeout"] = {
        "statement_timeout_ms": limit,
        **{k: sum(1 for x in v if limit and x > limit) for k, v in times.items()},
    }
    out["p95_ratio_bm25_over_ts_rank"] = round(
        out["latency_ms"]["bm25"]["p95_ms"] / out["latency_ms"]["ts_rank"]["p95_ms"], 2
    )
    common.write_json(out)
    return out


if __name__ == "__main__":
    with common.embedded_stack():
        result = run(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
    print(json.dumps({k: v for k, v in result.items() if k not in ("machine", "params")}, indent=1))
