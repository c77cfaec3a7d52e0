"""The code evaluation with this checkout's ranking, in this process, on the snapshots a stack already stored.

``ragline eval`` sends every search to the stack's query workers, which run the code they started
with; this runs the same :func:`ragline.operations.eval_code.run_code_eval` with a search function
that calls :func:`ragline.query.service.search` here (what the retrieval task calls), and an ingest
function that ingests nothing: each query is searched in the stored tenant of its own snapshot, or,
while the stack has not stored that one yet, the stored snapshot of the same repository (said per
query in ``meta.stand_ins``). Point it at the stack with ``RAGLINE_SERVICES_HOME``; use the include
and exclude globs of the run that stored the snapshots (they name the tenants).

    RAGLINE_SERVICES_HOME=/tmp/rl-code nice -n 10 .venv/bin/python -m bench.code_eval_inprocess \\
        ../shared/datasets/swe-loc-dev/instances.jsonl --out bench/results/eval-swe-loc-dev-floors.json \\
        --include '*.py' --exclude 'requests/packages/*' --exclude 'tests/*' --exclude '*/tests/*' \\
        --exclude 'testing/*' --exclude '*/testing/*' --exclude 'test_*' --exclude conftest.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ragline.operations.eval_code import (
    EVAL_GROUP,
    Snapshot,
    ingest_config_key,
    modes_for,
    read_code_queries,
    run_code_eval,
)


def stored_tenants(config: str) -> list[str]:
    from ragline.shared.worker import db

    with db.connection() as conn:
        rows = conn.execute(
            "SELECT DISTINCT tenant FROM documents WHERE tenant LIKE 'code-%%' AND tenant LIKE %s",
            (f"%-{config}",),
        ).fetchall()
    return sorted(r["tenant"] for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("queries", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--include", action="append", default=[])
    ap.add_argument("--exclude", action="append", default=[])
    ap.add_argument("--layers", default="code,source")
    args = ap.parse_args()

    from ragline.query import service
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.contracts import SearchRequest

    settings = get_settings()
    config = ingest_config_key(args.include, args.exclude, settings)
    tenants = stored_tenants(config)
    stand_ins: dict[str, str] = {}

    def ingest(snap: Snapshot, cfg: str, source: str) -> dict:
        own = [t for t in tenants if t.startswith(f"code-{snap.name}-")]
        if not own:
            raise RuntimeError(f"no stored snapshot of {snap.name} under configuration {cfg}")
        tenant = own[0]
        stand_ins[f"{snap.name}@{snap.ref}"] = tenant
        return {"tenant": tenant, "commit": tenant.split("-")[-2], "outcome": "stored"}

    def search(query: str, tenant: str, mode: str, layers: list[str], structural: bool) -> dict:
        req = SearchRequest(
            query=query,
            tenant=tenant,
            groups=[EVAL_GROUP],
            k=settings.retrieval.top_n,
            mode=mode,
            layers=layers,
            rerank=False,
            structure=structural,
        )
        return service.search(req).model_dump(mode="json")

    queries = read_code_queries(args.queries)
    result = run_code_eval(
        queries, ingest, search, modes_for("all"), args.layers, config, settings=settings, parallel=1
    )
    result["meta"].update(
        include=args.include,
        exclude=args.exclude,
        query_file=str(args.queries),
        stand_ins=stand_ins,
        searched_in_process=True,
    )
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=2))


if __name__ == "__main__":
    main()
