"""The code evaluation with this checkout's ranking, in this process, on the snapshots a stack already stored.

``ragline eval`` sends every search to the stack's query workers, which run the code they started
with; this runs the same :func:`ragline.operations.eval_code.run_code_eval` with a search function
that calls :func:`ragline.query.service.search` here (what the retrieval task calls), and an ingest
function that ingests nothing: each query is searched in the stored tenant of its own snapshot, or,
while the stack has not stored that one yet, a stored snapshot of the same repository (said per
snapshot in ``meta.stand_ins``; ``ragline eval --mode lexical`` with the same globs stores them all
without waiting for their vectors). Point it at the stack with ``RAGLINE_SERVICES_HOME``; use the include
and exclude globs of the run that stored the snapshots (they name the tenants). Beside the default's
file list it scores the file ranking of before the lexical list's vote on the same hits
(:mod:`bench.code_before`, ``before the vote (the floors alone)`` in ``file_rank``), and it records how many of each
stored snapshot's rows had their vectors (``meta.vectors``): a stack still filling is evaluated as
it stands, and says so.

    RAGLINE_SERVICES_HOME=/tmp/rl-code nice -n 10 .venv/bin/python -m bench.code_eval_inprocess \\
        ../shared/datasets/swe-loc-dev/instances.jsonl --out bench/results/eval-swe-loc-dev-floors.json \\
        --include '*.py' --exclude 'requests/packages/*' --exclude 'tests/*' --exclude '*/tests/*' \\
        --exclude 'testing/*' --exclude '*/testing/*' --exclude 'test_*' --exclude conftest.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench import code_before
from ragline.operations.eval_code import (
    EVAL_GROUP,
    CodeQuery,
    CodeReport,
    Snapshot,
    ingest_config_key,
    layer_variants,
    modes_for,
    question,
    read_code_queries,
    run_code_eval,
    snapshot_tenant,
)
from ragline.query.retrieval.search import LIST_DEPTH

BEFORE = code_before.LABEL


def stored_tenants(config: str) -> list[str]:
    from ragline.shared.worker import db

    with db.connection() as conn:
        rows = conn.execute(
            "SELECT DISTINCT tenant FROM documents WHERE tenant LIKE 'code-%%' AND tenant LIKE %s",
            (f"%-{config}",),
        ).fetchall()
    return sorted(r["tenant"] for r in rows)


VECTORS_SQL = """
SELECT c.tenant, count(*) AS total, count(*) FILTER (WHERE c.embedding IS NULL) AS awaiting
FROM chunks c WHERE c.tenant = ANY(%(tenants)s) AND c.layer = ANY(%(embedded)s::text[])
GROUP BY c.tenant
"""


def vectors(tenants: list[str]) -> dict[str, dict[str, int]]:
    """Per tenant: the rows the embedding budget embeds, and how many of them have their vector."""
    from ragline.shared.worker import db, pending_vectors

    budget = pending_vectors.VectorBudget.from_settings()
    with db.connection() as conn:
        layers = [r["layer"] for r in conn.execute("SELECT DISTINCT layer FROM chunks").fetchall()]
        rows = conn.execute(
            VECTORS_SQL, {"tenants": tenants, "embedded": [x for x in layers if budget.embeds(x)]}
        ).fetchall()
    return {r["tenant"]: {"embedded": r["total"] - r["awaiting"], "rows": r["total"]} for r in rows}


def add_before(
    result: dict,
    queries: list[CodeQuery],
    files: dict[tuple[str, str, tuple[str, ...]], list[str]],
    variants: dict[str, list[str]],
    tenant_of: dict[str, str],
) -> None:
    """Score the old file ranking's lists (``files``: per question, tenant and layers) as a file
    ranking variant of the default, beside ``the fused hits' files alone (no vote, no floors)``."""
    for variant, layers in variants.items():
        report = CodeReport(BEFORE)
        for q in queries:
            tenant = tenant_of[f"{q.snapshot.name}@{q.snapshot.ref}"]
            report.add(q, files[(question(q.query), tenant, tuple(layers))])
        name = f"hybrid+structure [{variant}]"
        result["file_rank"].setdefault(name, {})[BEFORE] = report.summary()
        result["file_rank_per_query"].setdefault(name, {})[BEFORE] = report.rows


def arguments(doc: str) -> argparse.ArgumentParser:
    """A code query set, the result file, and the globs of the run that stored its snapshots."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("queries", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--include", action="append", default=[])
    ap.add_argument("--exclude", action="append", default=[])
    return ap


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--layers", default="code,source")
    args = ap.parse_args()

    from ragline.ingest import git
    from ragline.query import service
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.contracts import SearchRequest

    settings = get_settings()
    config = ingest_config_key(args.include, args.exclude, settings)
    tenants = stored_tenants(config)
    searched_in: dict[str, str] = {}
    stand_ins: dict[str, str] = {}
    sources: dict[str, str] = {}
    before: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
    # each question's vector and raw lexical list (their modes run before hybrid+structure), the
    # leads the file ranking before the vote floored
    single: dict[tuple[str, str, tuple[str, ...], str], list] = {}

    def ingest(snap: Snapshot, cfg: str, source: str) -> dict:
        clone = next((settings.home_dir / "eval" / "repos").glob(f"{snap.name}-*.git"), None)
        own = snapshot_tenant(snap, git.resolve_commit(clone, snap.ref), cfg) if clone else ""
        same_repo = [t for t in tenants if t.startswith(f"code-{snap.name}-")]
        if own not in tenants and not same_repo:
            raise RuntimeError(f"no stored snapshot of {snap.name} under configuration {cfg}")
        tenant = own if own in tenants else same_repo[0]
        searched_in[f"{snap.name}@{snap.ref}"] = tenant
        sources[tenant] = snap.name
        if tenant != own:
            stand_ins[f"{snap.name}@{snap.ref}"] = tenant
        return {
            "tenant": tenant,
            "commit": tenant.split("-")[-2],
            "outcome": "stored" if tenant == own else "stand-in",
        }

    def search(query: str, tenant: str, mode: str, layers: list[str], structural: bool) -> dict:
        req = SearchRequest(
            query=query,
            tenant=tenant,
            groups=[EVAL_GROUP],
            k=LIST_DEPTH,
            mode=mode,
            layers=layers,
            rerank=False,
            structure=structural,
        )
        resp = service.search(req)
        key = (query, tenant, tuple(layers))
        if mode in ("vector", "lexical") and not structural:
            single[(*key, mode)] = resp.hits
        if mode == "hybrid" and structural:
            leads = [single.get((*key, m), []) for m in ("vector", "lexical")]
            before[key] = code_before.ranked_paths(resp.hits, query, sources[tenant], leads)
        return resp.model_dump(mode="json")

    queries = read_code_queries(args.queries)
    result = run_code_eval(
        queries, ingest, search, modes_for("all"), args.layers, config, settings=settings, parallel=1
    )
    add_before(result, queries, before, layer_variants(args.layers, settings), searched_in)
    result["meta"].update(
        include=args.include,
        exclude=args.exclude,
        query_file=str(args.queries),
        stand_ins=stand_ins,
        searched_in_process=True,
        vectors=vectors(sorted(set(searched_in.values()))),
        file_rank_before=code_before.BEFORE,
        code=code_before.checkout(),
    )
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=2))


if __name__ == "__main__":
    main()
