"""Pseudo-relevance feedback on the dev sets: quality of each setting and its latency cost.

    RAGLINE_SERVICES_HOME=/tmp/rl-eval python -m bench.prf tydi=TENANT xquad=TENANT [--out PATH]

(default output: bench/results/eval-prf-sweep.json)

TENANT: an evaluation tenant kept by ``ragline eval ... --keep`` (the corpus already ingested by the
workers with the current defaults). Every question is embedded once in this process; then every
setting of :data:`VARIANTS` runs the retrieval task's own search (``ragline.query.retrieval.search.search``,
the query pool's role, depth ``retrieval.top_n`` as ``ragline eval`` asks) and is scored with the
metrics of :mod:`ragline.operations.eval`. The latency phase times that search call per question for PRF
off and each PRF kind, interleaved question by question so a busy machine slows them alike;
the paired differences are the per-question cost. Dev splits only: a file named ``test`` is refused.
Not part of ``make bench``: it is the measurement behind the ``RAGLINE_PRF_MODE`` default.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

from bench import common

DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"
QUERIES = {"tydi": DATASETS / "tydi-ru-dev" / "dev.jsonl", "xquad": DATASETS / "xquad-ru" / "dev.jsonl"}

#: keyword overrides of the prf group; "off" first (the baseline of the same run)
VARIANTS: list[dict] = [
    {"prf_mode": "off"},
    *(
        {"prf_mode": "dense", "prf_docs": m, "prf_alpha": 1.0, "prf_beta": beta}
        for m in (1, 3, 5)
        for beta in (0.25, 0.5, 1.0)
    ),
    *(
        {"prf_mode": "lexical", "prf_docs": m, "prf_terms": terms, "prf_term_weight": w}
        for m in (3, 5)
        for terms in (3, 10)
        for w in (0.2, 0.5)
    ),
    {"prf_mode": "both", "prf_docs": 3, "prf_beta": 0.25, "prf_terms": 3, "prf_term_weight": 0.2},
]
#: the settings timed in the latency phase
TIMED: list[dict] = [
    {"prf_mode": "off"},
    {"prf_mode": "dense", "prf_docs": 3, "prf_beta": 0.5},
    {"prf_mode": "lexical", "prf_docs": 3, "prf_terms": 10, "prf_term_weight": 0.5},
    {"prf_mode": "both", "prf_docs": 3, "prf_beta": 0.5, "prf_terms": 10, "prf_term_weight": 0.5},
]


def _label(overrides: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in overrides.items())


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2)


def paired(variant: list[float], base: list[float], seed: int = 0, rounds: int = 2000) -> dict:
    """A setting's per-question nDCG@10 against PRF off on the same questions: the mean difference,
    a 95% bootstrap interval of it, and how many questions went up and down."""
    diffs = [a - b for a, b in zip(variant, base, strict=True)]
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return {
        "delta_ndcg@10": round(statistics.fmean(diffs), 4),
        "delta_ci95": [round(means[int(0.025 * rounds)], 4), round(means[int(0.975 * rounds) - 1], 4)],
        "up": sum(d > 1e-9 for d in diffs),
        "down": sum(d < -1e-9 for d in diffs),
    }


def summarize(result: dict) -> dict:
    """Each row's per-question list replaced by its comparison with PRF off in the same mode."""
    for s in result["sets"].values():
        base = {r["mode"]: r["per_query_ndcg"] for r in s["rows"] if r["prf"] == "off"}
        for r in s["rows"]:
            r.update(paired(r.pop("per_query_ndcg"), base[r["mode"]]))
    return result


def run(tenants: dict[str, str], repeats: int = 2) -> dict:
    import numpy as np

    from ragline.operations.eval import EVAL_GROUP, ModeReport, doc_ranking, grades, read_jsonl
    from ragline.query.retrieval.search import search
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.contracts import SearchRequest
    from ragline.shared.worker import db, providers
    from ragline.shared.worker.text import embedding_form

    base = get_settings()
    depth = base.retrieval.top_n
    embedder = providers.get_embedder()  # loaded here, in the process that queries (no fork follows)

    def varied(overrides: dict):
        return base.overridden(**overrides)

    with db.connection() as conn:
        out: dict = {"machine": common.machine(conn), "sets": {}}
    for name, tenant in tenants.items():
        path = QUERIES[name]
        if "test" in path.name:
            raise SystemExit(f"{path}: a test split is never tuned on")
        queries = read_jsonl(path)
        vecs = [
            np.asarray(embedder.embed_query(embedding_form(row["query"])), dtype=np.float32)
            for row in queries
        ]

        def one(row: dict, vec, mode: str, settings, tenant: str = tenant) -> tuple[list[str], float]:
            req = SearchRequest(query=row["query"], tenant=tenant, groups=[EVAL_GROUP], k=depth, mode=mode)
            with db.query_connection() as conn:
                t = time.perf_counter()
                resp = search(conn, req, vec, settings, limit=depth)
                ms = (time.perf_counter() - t) * 1000
            return doc_ranking(h.doc_id for h in resp.hits), ms

        rows = []
        for overrides in VARIANTS:
            settings = varied(overrides)
            modes = ["hybrid"]
            if overrides["prf"] in ("off", "dense"):
                modes.append("vector")
            if overrides["prf"] in ("off", "lexical"):
                modes.append("lexical")
            for mode in modes:
                rep = ModeReport(mode, 10)
                for row, vec in zip(queries, vecs, strict=True):
                    rep.add(row["query"], one(row, vec, mode, settings)[0], grades(row["relevant"]))
                rows.append({**overrides, "mode": mode, **rep.summary(), "per_query_ndcg": rep.ndcg})
                print(name, _label(overrides), mode, rep.summary(), file=sys.stderr)
        timed = [varied(o) for o in TIMED]
        load_before = [round(x, 2) for x in os.getloadavg()]
        times: list[list[float]] = [[] for _ in TIMED]
        for _ in range(repeats):
            for row, vec in zip(queries, vecs, strict=True):
                for i, settings in enumerate(timed):
                    times[i].append(one(row, vec, "hybrid", settings)[1])
        latency = []
        for overrides, ms in zip(TIMED, times, strict=True):
            extra = [a - b for a, b in zip(ms, times[0], strict=True)]
            latency.append(
                {
                    **overrides,
                    "calls": len(ms),
                    "p50_ms": _pct(ms, 0.5),
                    "p95_ms": _pct(ms, 0.95),
                    "extra_p50_ms": _pct(extra, 0.5),
                    "extra_p95_ms": _pct(extra, 0.95),
                    "extra_mean_ms": round(statistics.fmean(extra), 2),
                }
            )
        out["sets"][name] = {
            "queries": str(path),
            "tenant": tenant,
            "n": len(queries),
            "rows": rows,
            "latency": latency,
            "latency_load_average": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]},
        }
    out["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main(argv: list[str]) -> None:
    out_path = common.RESULTS / "eval-prf-sweep.json"
    tenants = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--out":
            out_path = Path(args.pop(0))
        else:
            name, tenant = arg.split("=", 1)
            tenants[name] = tenant
    result = summarize(run(tenants))
    out_path.write_text(json.dumps(result, ensure_ascii=False, indent=1))
    for name, s in result["sets"].items():
        for r in s["rows"]:
            print(
                f"{name:6} {r['mode']:8} {_label({k: v for k, v in r.items() if k.startswith('prf')}):70}"
                f" ndcg {r['ndcg@10']:.4f} ({r['delta_ndcg@10']:+.4f}, 95% {r['delta_ci95']}, up {r['up']}"
                f" down {r['down']}) fail {r['fail@20']:.4f} mrr {r['mrr@10']:.4f}"
            )
        for r in s["latency"]:
            print(name, r)
    print("written", out_path)


if __name__ == "__main__":
    main(sys.argv[1:])
