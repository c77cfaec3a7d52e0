"""c. Retrieval latency through the ``query`` queue against the same SQL run directly, and
recall@10 of the ANN path against exact search.

100,000 synthetic chunks (:mod:`bench.synthetic`) in two tenants: one holds 99% of the rows
(its tenant filter selects almost everything) and one holds 1% (a selective filter, where a
plain HNSW scan would return too few rows without ``hnsw.iterative_scan``). The query vector
is passed precomputed (``SearchRequest.query_vector``, packed by ``ragline.pack_vector`` as a
caller that embeds itself sends it) so the embedder is not measured.
Direct and queued calls alternate query by query (in a rotating order), so both see the same machine load. Both run
as the query pool's read-only role, whose row-level security policies (migration 0007) filter
every row; the same direct statement as the tables' owner (no policy) alternates with them and
shows what the policies cost.

The queued side is ``ragline up``'s query pool as it runs with a remote embedder (solo processes,
``RAGLINE_WORKERS_QUERY_POOL=auto``): the targets. The threads pool, the default when the model runs in
the worker, is measured in the same run for comparison (shared/config/settings.py explains the choice).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import psycopg
from psycopg.rows import dict_row

from bench import common
from bench.synthetic import EmbeddingSpace, load_chunks, structure_stats
from ragline.query.retrieval.search import LIST_DEPTH

NAME = "retrieval"
TITLE = "Retrieval latency: query queue vs direct SQL; recall@10 ANN vs exact"
SMOKE = {"n_chunks": 1000, "n_queries": 4, "recall_queries": 4, "warmup": 1, "rebuild_index": False}
ACL = ["bench"]
K = 10
#: the order of the four calls of each query, in turn: each side once in each position
ORDERS = (
    ("rls", "owner", "queue", "bare"),
    ("queue", "bare", "owner", "rls"),
    ("owner", "rls", "bare", "queue"),
    ("bare", "queue", "rls", "owner"),
)


def _tenants(prefix: str, n_chunks: int, small_share: float) -> dict[str, int]:
    n_small = max(K * 2, int(round(n_chunks * small_share)))
    return {f"{prefix}-99pct": n_chunks - n_small, f"{prefix}-1pct": n_small}


def _load(
    tenants: dict[str, int],
    space: EmbeddingSpace,
    rng: np.random.Generator,
    rebuild_index: bool,
    maintenance_work_mem: str,
) -> dict:
    """COPY every tenant's rows (index dropped first when rebuilding), then build HNSW and ANALYZE."""
    from ragline.shared.worker import db

    info: dict = {}
    vectors = {t: space.sample(n, rng) for t, n in tenants.items()}
    info["structure"] = structure_stats(np.concatenate(list(vectors.values())), rng)
    with db.connect() as conn:
        if rebuild_index:
            conn.execute("DROP INDEX IF EXISTS chunks_embedding_hnsw")
        t = time.perf_counter()
        with conn.transaction():
            for tenant, vecs in vectors.items():
                load_chunks(conn, tenant, vecs, ACL)
        info["copy_s"] = round(time.perf_counter() - t, 2)
        if rebuild_index:
            conn.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
            conn.execute("SET max_parallel_maintenance_workers = 1")
            t = time.perf_counter()
            conn.execute(
                "CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops)"
                " WITH (m = 16, ef_construction = 64)"
            )
            info["hnsw_build_s"] = round(time.perf_counter() - t, 2)
            info["hnsw_build_settings"] = {
                "maintenance_work_mem": maintenance_work_mem,
                "max_parallel_maintenance_workers": 1,
                "m": 16,
                "ef_construction": 64,
            }
        # leave nothing for autovacuum or the checkpointer to do while latencies are measured
        common.settle("chunks", "documents")
        info["total_chunks_in_table"] = conn.execute("SELECT count(*) AS n FROM chunks").fetchone()["n"]
    return info


def _request(tenant: str, qvec: np.ndarray):
    from ragline.shared.sdk.contracts import SearchRequest

    return SearchRequest(
        query="", tenant=tenant, groups=ACL, k=K, mode="vector", query_vector=[float(x) for x in qvec]
    )


def _direct(tenant: str, qvec: np.ndarray, settings, rls: bool = True) -> tuple[float, list[tuple[str, int]]]:
    """The retrieval task's vector statement (``ragline.query.retrieval.retrievers.vector_rows``: same SQL, same
    transaction settings, on the path ``vector_path`` picks from the counts the transaction's first
    round trip reads, as the task does) in a read-only transaction on a pooled connection of this
    process: as the query pool's role (row-level security on, like the task) or, ``rls=False``, as
    the tables' owner. Milliseconds, and the first ``K`` rows' keys."""
    from ragline.query.retrieval.retrievers import vector_rows
    from ragline.query.retrieval.transaction import read_only_transaction, set_transaction_params
    from ragline.shared.worker import db

    req = _request(tenant, qvec)
    n = max(LIST_DEPTH, K)
    t = time.perf_counter()
    with db.query_connection() if rls else db.connection() as conn, read_only_transaction(conn):
        limit = set_transaction_params(conn, req, settings, n)
        rows = vector_rows(conn, req, qvec, n, settings, limit.vector_path(settings))
    return (time.perf_counter() - t) * 1000, [(r["doc_id"], r["chunk_no"]) for r in rows[:K]]


def _payload(tenant: str, qvec: np.ndarray, groups: list[str] = ACL) -> dict:
    """The task's payload with the query vector packed (``ragline.pack_vector``), as a caller
    that embeds its questions itself sends it."""
    from ragline.shared.sdk.contracts import pack_vector

    payload = _request(tenant, qvec).model_dump(exclude_defaults=True)
    payload.update(mode="vector", groups=groups, query_vector=pack_vector(qvec))
    return payload


def _queued(
    tenant: str, qvec: np.ndarray, groups: list[str] = ACL
) -> tuple[float, float, list[tuple[str, int]]]:
    """Round trip of ``ragline.query.retrieve``: (client ms, the task's own ``total`` ms, hit keys)."""
    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker.celery_app import app

    payload = _payload(tenant, qvec, groups)
    t = time.perf_counter()
    res = app.send_task(TASK_QUERY_RETRIEVE, args=[payload]).get(timeout=120)
    ms = (time.perf_counter() - t) * 1000
    if "hits" not in res:
        raise RuntimeError(f"retrieve task failed: {res}")
    return (
        ms,
        float(res.get("timings_ms", {}).get("total", 0.0)),
        [(h["doc_id"], h["chunk_no"]) for h in res["hits"]],
    )


def _exact(conn: psycopg.Connection, tenant: str, qvec: np.ndarray) -> list[tuple[str, int]]:
    rows = conn.execute(
        "SELECT doc_id, chunk_no FROM chunks WHERE tenant = %s AND acl && %s::text[] AND embedding IS NOT NULL"
        " ORDER BY embedding <=> %s, doc_id, chunk_no LIMIT %s",
        (tenant, ACL, qvec, K),
    ).fetchall()
    return [(r["doc_id"], r["chunk_no"]) for r in rows]


def _plan(conn: psycopg.Connection, tenant: str, qvec: np.ndarray, settings) -> str:
    """EXPLAIN of the vector statement (custom plan) on ``conn`` (the query pool's role: the
    row-level security filter shows), to show which path the planner takes."""
    from ragline.query.retrieval import sql, transaction
    from ragline.query.retrieval.filters import compile_filters

    req = _request(tenant, qvec)
    n = max(LIST_DEPTH, K)
    try:
        f = compile_filters(req)
        statement = sql.render(sql.VECTOR_SQL, f.where_sql())
        with conn.transaction():
            transaction.set_transaction_params(conn, req, settings, n)
            rows = conn.execute(
                "EXPLAIN " + statement, {"tenant": tenant, "groups": ACL, "n": n, "qvec": qvec, **f.params}
            )
            text = "\n".join(r["QUERY PLAN"] for r in rows.fetchall())
    except Exception as exc:  # the plan is informative only; the query module may have moved on
        return f"unavailable: {type(exc).__name__}: {exc}"
    return re.sub(r"'\[[-0-9e.,]+\]'", "'<qvec>'", text)


def _measure_pool(
    tenants: dict[str, int],
    queries: np.ndarray,
    warmup: int,
    n_queries: int,
    recall_queries: int,
    exact_conn: psycopg.Connection,
    settings,
) -> dict:
    """Round trip without SQL, then per tenant: direct and queued latencies alternating query by query,
    and recall@10 of the queued (ANN) hits against exact search for the first ``recall_queries``."""
    from bench import noop_worker
    from ragline.shared.worker import db

    out: dict = {"scenarios": {}}
    # Celery round trip alone: the same task with no groups returns before any SQL
    empty = [_queued(next(iter(tenants)), q, [])[0] for q in queries[: max(warmup, n_queries // 2)]]
    out["queue_round_trip_without_sql"] = common.latency_summary(empty)
    for label, tenant in zip(("99% tenant", "1% tenant"), tenants, strict=True):
        with db.query_connection() as c:
            plan = _plan(c, tenant, queries[0], settings)
        for q in queries[:warmup]:
            _direct(tenant, q, settings)
            _direct(tenant, q, settings, rls=False)
            _queued(tenant, q)
            noop_worker.round_trip_ms()
        direct_ms, owner_ms, queue_ms, task_ms, recalls, owner_recalls, bare_ms = [], [], [], [], [], [], []
        for i, q in enumerate(queries[warmup : warmup + max(n_queries, recall_queries)]):
            # rotate the order so that no side always runs first (on pages the others then find in
            # shared buffers): the queue first or last, the owner before or after the query role
            calls: dict = {}
            for side in ORDERS[i % len(ORDERS)]:
                if side == "queue":
                    calls[side] = _queued(tenant, q)
                elif side == "bare":
                    calls[side] = noop_worker.round_trip_ms()
                else:
                    calls[side] = _direct(tenant, q, settings, rls=side == "rls")
            ms, inside, ann = calls["queue"]
            owner_ann = calls["owner"][1]
            bare_ms.append(calls["bare"])
            direct_ms.append(calls["rls"][0])
            owner_ms.append(calls["owner"][0])
            queue_ms.append(ms)
            task_ms.append(inside)
            if i < recall_queries:
                exact = _exact(exact_conn, tenant, q)
                recalls.append(len(set(ann) & set(exact)) / max(1, min(K, len(exact))))
                owner_recalls.append(len(set(owner_ann) & set(exact)) / max(1, min(K, len(exact))))
        direct_ms, queue_ms, task_ms = direct_ms[:n_queries], queue_ms[:n_queries], task_ms[:n_queries]
        owner_ms, bare_ms = owner_ms[:n_queries], bare_ms[:n_queries]
        sc = {
            "tenant": tenant,
            "rows": tenants[tenant],
            "direct_sql": common.latency_summary(direct_ms),
            "direct_sql_owner_without_rls": common.latency_summary(owner_ms),
            # the same query as the query role and as the owner, back to back: the policies' cost
            "rls_minus_owner_ms": {
                "median": round(float(np.median(np.subtract(direct_ms, owner_ms))), 3),
                "mean": round(float(np.mean(np.subtract(direct_ms, owner_ms))), 3),
            },
            "query_queue": common.latency_summary(queue_ms),
            "inside_task_service_total": common.latency_summary(task_ms),
            "bare_celery_round_trip": common.latency_summary(bare_ms),
            "plan": plan,
            "direct_ms_samples": [round(x, 3) for x in direct_ms],
            "owner_ms_samples": [round(x, 3) for x in owner_ms],
            "queue_ms_samples": [round(x, 3) for x in queue_ms],
        }
        if recalls:
            sc.update(
                recall_at_10=round(float(np.mean(recalls)), 4),
                recall_min=round(float(np.min(recalls)), 4),
                recall_queries=len(recalls),
                # the same statement as the owner (no policy), on the same index in the same run
                recall_at_10_owner_without_rls=round(float(np.mean(owner_recalls)), 4),
                recall_min_owner_without_rls=round(float(np.min(owner_recalls)), 4),
            )
        out["scenarios"][label] = sc
    return out


def run(
    out_dir: Path = common.RESULTS,
    n_chunks: int = 100_000,
    small_share: float = 0.01,
    n_queries: int = 200,
    recall_queries: int = 100,
    warmup: int = 20,
    rebuild_index: bool = True,
    maintenance_work_mem: str = "1GB",
    tenant_prefix: str | None = None,
    seed: int = 11,
) -> dict:
    from pgvector.psycopg import register_vector

    from bench import noop_worker
    from ragline.shared.config.settings import get_settings
    from ragline.shared.worker import db

    settings = get_settings()
    prefix = tenant_prefix or f"bench-ret-{int(time.time())}"
    tenants = _tenants(prefix, n_chunks, small_share)
    space = EmbeddingSpace()
    rng = np.random.default_rng(seed)
    with db.connection() as c:
        desc = common.machine(c)
    load = _load(tenants, space, rng, rebuild_index, maintenance_work_mem)
    queries = space.sample(warmup + max(n_queries, recall_queries), np.random.default_rng(seed + 1))

    # exact search: its own connection, no prepared statements, index scans off (seq/bitmap + sort)
    exact_conn = psycopg.connect(
        settings.effective_database_url(), autocommit=True, row_factory=dict_row, prepare_threshold=None
    )
    register_vector(exact_conn)
    exact_conn.execute("SET enable_indexscan = off")
    raw: dict = {"load": load, "scenarios": {}}
    targets: list[common.Target] = []
    try:
        from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE

        # the query pool as deployed with a remote embedder (solo processes) carries the targets; the
        # threads pool (the default with an in-process model) is measured in the same run for comparison
        for kind in ("solo", "threads"):
            with (
                common.settings_env(workers_query_pool=kind),
                common.prefork_pools({"query": (TASK_QUERY_RETRIEVE, _payload("none", queries[0], []))}),
                noop_worker.bare_worker(),
            ):
                out = _measure_pool(
                    tenants,
                    queries,
                    warmup,
                    n_queries,
                    recall_queries if kind == "solo" else 0,
                    exact_conn,
                    get_settings(),
                )
            if kind == "solo":
                raw.update(out)
                for label, sc in out["scenarios"].items():
                    record, target = common.queue_overhead(
                        label,
                        sc["query_queue"]["p95_ms"],
                        sc["direct_sql"]["p95_ms"],
                        sc["bare_celery_round_trip"]["p95_ms"],
                    )
                    sc["queue_overhead"] = record
                    targets.append(target)
                    targets.append(
                        common.Target(f"{label}: recall@10 ANN vs exact", sc["recall_at_10"], ">=", 0.95)
                    )
            else:
                raw["threads_pool_comparison"] = out
    finally:
        exact_conn.close()
    params = {
        "n_chunks": n_chunks,
        "tenants": tenants,
        "n_queries": n_queries,
        "recall_queries": recall_queries,
        "warmup": warmup,
        "k": K,
        "retrieval_top_n": LIST_DEPTH,
        "hnsw_ef_search": settings.vector.hnsw_ef_search,
        "iterative_scan": "relaxed_order",
        "worker": f"ragline up's query pool, queue 'query', concurrency {settings.workers.query_concurrency}: solo"
        " processes (RAGLINE_WORKERS_QUERY_POOL=auto with a remote embedder; targets) and threads (auto with"
        " an in-process model; comparison, same run)",
        "space": {"dim": space.dim, "clusters": space.clusters, "rank": space.rank},
    }
    notes = [
        "Vectors: Gaussian mixture (200 topics) + 32-d low-rank spread + shared mean direction + noise,"
        " L2-normalised; queries drawn from the same distribution, passed as query_vector (no embedder),"
        " packed (float32 little-endian in base64, ragline.pack_vector: 2 KB instead of 8.5 KB of JSON).",
        "Exact search: separate connection, prepare_threshold=None, enable_indexscan=off.",
        "queue_round_trip_without_sql: the same task with groups=[] (returns before SQL): Celery + Redis cost.",
        "bare_celery_round_trip: a no-op task (bench/noop_worker.py: ragline's Celery app, one task no ragline"
        " worker registers) on its own worker process of the query pool's kind, alternated with the other"
        " three calls query by query. The queue target is ragline's own overhead: queue p95 - direct p95"
        f" <= {common.QUEUE_OVERHEAD_FACTOR:g} x the bare round trip's p95 (queue_overhead per scenario).",
        "inside_task_service_total: ragline.query.service.search's own total as reported by the task.",
        "Row-level security (migration 0007): the task and direct_sql run as the query pool's role, whose"
        " policies filter every row on ragline.tenant / ragline.groups; direct_sql_owner_without_rls is the"
        " same statement as the tables' owner (no policy), alternated with the others query by query, so"
        " the difference between the two direct columns is what the policies cost (rls_minus_owner_ms: per"
        " query, paired). recall_at_10 is of the queued (query role) hits; recall_at_10_owner_without_rls of"
        " the owner's, on the same index in the same run (an HNSW graph differs from build to build).",
        "threads_pool_comparison: the same measurement with the threads pool (the default when the model"
        " runs in the worker: one shared model, every core per query embedding); no target, no recall. The"
        " pools are measured one after the other (the second on warmer caches): compare each pool's queue"
        " column with the direct column of its own pass, and the round trips without SQL with each other.",
    ]
    data = common.result(NAME, TITLE, params, raw, targets, desc, notes)
    common.write_json(data, out_dir)
    groups = {}
    for label, s in raw["scenarios"].items():
        for p in ("p50", "p95"):
            groups[f"{label}\n{p}"] = {
                "direct SQL, owner (no RLS)": s["direct_sql_owner_without_rls"][f"{p}_ms"],
                "direct SQL": s["direct_sql"][f"{p}_ms"],
                "inside the task": s["inside_task_service_total"][f"{p}_ms"],
                "query queue round trip": s["query_queue"][f"{p}_ms"],
                "bare Celery round trip (no-op)": s["bare_celery_round_trip"][f"{p}_ms"],
            }
    for p in ("p50", "p95"):
        groups[f"task, no SQL\n{p}"] = {
            "query queue round trip": raw["queue_round_trip_without_sql"][f"{p}_ms"]
        }
    threads = raw.get("threads_pool_comparison")
    if threads:
        for label, sc in threads["scenarios"].items():
            for k in groups:
                if k.startswith(label):
                    groups[k]["threads pool round trip"] = sc["query_queue"][k.rsplit("\n", 1)[1] + "_ms"]
        for p in ("p50", "p95"):
            groups[f"task, no SQL\n{p}"]["threads pool round trip"] = threads["queue_round_trip_without_sql"][
                f"{p}_ms"
            ]
    common.bar_plot(
        out_dir / f"{NAME}.png",
        f"Retrieval at {n_chunks:,} chunks (recall@10: "
        + ", ".join(f"{k} {v['recall_at_10']:.3f}" for k, v in raw["scenarios"].items())
        + ")",
        groups,
        "latency, ms",
        targets,
    )
    return data
