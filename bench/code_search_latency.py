"""A code search's latency with the lexical list's vote on the file order and before it, alternated.

Each issue of a code query set is searched (the default: hybrid with structure, layers ``code``) in
the stored snapshot of its repository by :func:`ragline.query.service.search`, in this process,
once with this checkout's file ranking (the lexical list, re-scored by structure, votes on the
file order; each single list's first ten files floored within 2n + 1 places) and once with the one
before it (:mod:`bench.code_before`: the floors alone, on the raw lexical list, and the structural
re-score's name matching of then), the two in
alternating order from issue to issue and round to round, so both see the same machine. The
question's vector is computed once beforehand and sent with the request (``query_vector``, as a
caller that embeds itself does), so the timing is the search's own: its statements, fusion,
structure and file ranking. Reported per side: the search's wall time and the file ranking's own
(``leads`` and ``files``), p50 / p95 / mean, and the load average.

    RAGLINE_SERVICES_HOME=/tmp/rl-code RAGLINE_DEADLINES_STATEMENT_TIMEOUT_MS=30000 nice -n 10 \\
        .venv/bin/python -m bench.code_search_latency ../shared/datasets/swe-loc-dev/instances.jsonl \\
        --include '*.py' --exclude 'requests/packages/*' --exclude 'tests/*' --exclude '*/tests/*' \\
        --exclude 'testing/*' --exclude '*/testing/*' --exclude 'test_*' --exclude conftest.py \\
        --rounds 5 --out bench/results/code-search-latency-vote.json
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager

from bench import code_before
from bench.code_eval_inprocess import arguments, stored_tenants
from ragline.operations.eval_code import EVAL_GROUP, ingest_config_key, question, read_code_queries
from ragline.query import service
from ragline.query.retrieval import file_rank, ranking, sql, structure
from ragline.query.retrieval.search import LIST_DEPTH
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import SearchRequest, pack_vector

SIDES = ("before", "vote")


def _old_leads(self, vector: list[dict], lexical: list[dict], named=()) -> list[list]:
    """What the search kept for the file list before the vote: both lists' first files, raw."""
    if not (vector and lexical and self.file_rank):
        return []
    return [[sql.hit(r) for r in file_rank.lead_files(rows, file_rank.LEADS)] for rows in (vector, lexical)]


def _old_files(hits, query, settings, leads):
    if not settings.code.file_rank or not any(h.layer in settings.code.layers for h in hits):
        return []
    return code_before.response_files(hits, query, leads)


def _timed(fn: Callable, spent: dict[str, float], key: str) -> Callable:
    def run(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += (time.perf_counter() - t) * 1000

    return run


@contextmanager
def side(name: str, spent: dict[str, float]):
    """The search's file ranking of one side, timed into ``spent`` (``leads``, ``files``)."""
    owner = ranking.RankingPolicy
    leads, files, spells = owner.leads, file_rank.response_files, structure.spells
    if name == "before":
        leads_now, files_now = _old_leads, _old_files
        # and the structural re-score's name matching of then, which every search runs
        structure.spells = code_before.structure_module().spells
    else:
        leads_now, files_now = leads, files
    owner.leads = _timed(leads_now, spent, "leads")  # type: ignore[method-assign]
    file_rank.response_files = _timed(files_now, spent, "files")
    try:
        yield
    finally:
        owner.leads, file_rank.response_files = leads, files  # type: ignore[method-assign]
        structure.spells = spells


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "n": len(values),
        "p50": round(statistics.median(ordered), 3),
        "p95": round(ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))], 3),
        "mean": round(statistics.fmean(ordered), 3),
    }


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    from ragline.shared.worker.providers import get_embedder

    settings = get_settings()
    tenants = stored_tenants(ingest_config_key(args.include, args.exclude, settings))
    c = settings.code
    embedder = get_embedder()
    cases = []
    for q in read_code_queries(args.queries):
        own = [t for t in tenants if t.startswith(f"code-{q.snapshot.name}-")]
        text = question(q.query)
        cases.append((q.id, own[0], text, pack_vector(embedder.embed_query(text))))
    times: dict[str, dict[str, list[float]]] = {s: {"search": [], "leads": [], "files": []} for s in SIDES}
    loads = [os.getloadavg()]
    degraded = dict.fromkeys(SIDES, 0)  # searches that said so (rows awaiting vectors): timed all the same
    for r in range(args.rounds):
        for i, (_, tenant, text, vector) in enumerate(cases):
            for name in SIDES if (r + i) % 2 == 0 else reversed(SIDES):
                spent = {"leads": 0.0, "files": 0.0}
                req = SearchRequest(
                    query=text,
                    query_vector=vector,
                    tenant=tenant,
                    groups=[EVAL_GROUP],
                    k=LIST_DEPTH,
                    mode="hybrid",
                    layers=[c.source_layer, c.symbols_layer],
                    rerank=False,
                    structure=True,
                )
                with side(name, spent):
                    t = time.perf_counter()
                    resp = service.search(req)
                    times[name]["search"].append((time.perf_counter() - t) * 1000)
                degraded[name] += bool(resp.degraded)
                for key, ms in spent.items():
                    times[name][key].append(ms)
        loads.append(os.getloadavg())
        print(f"round {r + 1}: load {' '.join(f'{x:.1f}' for x in loads[-1])}", flush=True)
    out = {
        "sides": {s: {k: summary(v) for k, v in t.items()} for s, t in times.items()},
        "meta": {
            "queries": len(cases),
            "degraded": degraded,
            "rounds": args.rounds,
            "tenants": sorted({t for _, t, _, _ in cases}),
            "before": code_before.BEFORE,
            "code": code_before.checkout(),
            "load_average": loads,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
    args.out.write_text(json.dumps(out, indent=2))
    print(json.dumps(out["sides"], indent=2))


if __name__ == "__main__":
    main()
