"""f. One million chunks on one machine: bulk load, HNSW build, size on disk and in memory, and
recall@10 / latency over ``ef_search`` for the ``vector`` and ``halfvec`` indexes, per tenant size,
with and without a selective ACL group; the query queue; the exact path for a small tenant; steady
ingestion into the live index.

``RAGLINE_BENCH_SCALE_N`` chunks (default 1,000,000) of :class:`bench.synthetic.EmbeddingSpace`
vectors in four tenants holding 90%, 9%, 0.9% and 0.1% of the rows. Every document (10 chunks) has
one to four ACL groups: ``g10`` on every tenth document, ``all`` on the others, ``g100`` as well on
every hundredth, and zero to two ``team-*`` groups; a query sees the whole tenant
(``groups=["all", "g10"]``), a tenth of it (``groups=["g10"]``) or a hundredth
(``groups=["g100"]``). The rows are COPYed with every HNSW index dropped, then the indexes are
built (as a first load or a ``ragline reembed`` would want to).

The ground truth is computed with numpy over the vectors held in memory, with the tenant and ACL
masks: the database is what is measured, so it is not trusted for the exact answer. Each search
is the query module's own vector statement (``ragline.query.retrieval.retrievers.vector_rows`` with
``set_transaction_params`` and the path ``vector_path`` picks, as the query pool's role under
row-level security), with the storage type, ``ef_search`` and exact-path threshold passed as
settings, so it measures what ``ragline`` runs. Latencies are client-side milliseconds of one read-only transaction on a pooled connection.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from contextlib import suppress
from pathlib import Path

import numpy as np

from bench import common
from bench.synthetic import EmbeddingSpace, load_chunks, structure_stats
from ragline.query.retrieval.search import LIST_DEPTH

NAME = "scale"
TITLE = "One million chunks: load, HNSW build, size, recall@10 and latency over ef_search (vector vs halfvec)"
SMOKE = {
    "n_chunks": 5_000,
    "n_queries": 5,
    "warmup": 1,
    "ef_values": (50, 100),
    "queue_queries": 4,
    "upsert_docs": 4,
    "maintenance_work_mem": "256MB",
    "cleanup": True,
}
K = 10
CHUNKS_PER_DOC = 10
#: tenant label -> share of the rows
SHARES = {"90%": 0.9, "9%": 0.09, "0.9%": 0.009, "0.1%": 0.001}
#: a query's groups: the whole tenant, the tenth of it in g10, the hundredth in g100
ACL_CASES = {"all": ["all", "g10"], "g10": ["g10"], "g100": ["g100"]}
#: every case at the defaults: p95 of the direct search at most this (ms)
CASE_P95_MS = 20.0
#: the ACL cases of the ef_search curve (ragline's exact paths off: HNSW, or the planner's walk of
#: the tenant, for every case); a hundredth of a large tenant there costs seconds a query
CURVE_ACL = ("all", "g10")
STORAGES = ("vector", "halfvec")
#: chunks/s of bench d's re-ingest (issue's reference rate for steady ingestion)
STEADY_BASELINE = 255.0


# --------------------------------------------------------------------------------------- load
def _tenants(prefix: str, n_chunks: int) -> dict[str, tuple[str, int]]:
    """label -> (tenant, rows): at least ten documents each, so that g10 holds one."""
    out = {}
    for label, share in SHARES.items():
        rows = max(10 * CHUNKS_PER_DOC, int(round(n_chunks * share)))
        out[label] = (f"{prefix}-{label.rstrip('%')}pct", rows - rows % CHUNKS_PER_DOC)
    return out


def doc_acl(d: int, rng: np.random.Generator) -> list[str]:
    """One to four groups: g10 on every tenth document, ``all`` on the others, g100 as well on every
    hundredth, 0-2 teams."""
    groups = ["g10" if d % 10 == 0 else "all"] + (["g100"] if d % 100 == 0 else [])
    extra = int(rng.integers(0, 3))
    groups += [f"team-{t}" for t in rng.choice(20, size=extra, replace=False)]
    return groups


def _sample(space: EmbeddingSpace, n: int, rng: np.random.Generator, batch: int = 100_000) -> np.ndarray:
    """``space.sample`` in batches (float64 intermediates of a million rows would need ~9 GB)."""
    out = np.empty((n, space.dim), dtype=np.float32)
    for s in range(0, n, batch):
        out[s : s + batch] = space.sample(min(batch, n - s), rng)
    return out


def visible_rows(conn, tenant: str, groups: list[str]) -> int:
    """The caller-scoped count the planner reads (migration 0017's counters), as the owner."""
    from ragline.query.retrieval.transaction import scope_rows
    from ragline.shared.sdk.contracts import SearchRequest

    return scope_rows(conn, SearchRequest(query="", tenant=tenant, groups=groups))[1]


def hnsw_indexes(conn) -> dict[str, str]:
    """name -> definition of every HNSW index on chunks."""
    rows = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'chunks' AND indexdef ILIKE '%USING hnsw%'"
    ).fetchall()
    return {r["indexname"]: r["indexdef"] for r in rows}


def postgres_memory(conn) -> dict[str, float]:
    """RSS and PSS (shared pages split between the processes that map them) of this server's
    processes: the postmaster of the connection's backend and its children."""
    import psutil

    pid = conn.execute("SELECT pg_backend_pid() AS p").fetchone()["p"]
    post = psutil.Process(pid).parent()
    rss = pss = 0
    procs = [post, *post.children()]
    for p in procs:
        with suppress(psutil.Error):
            info = p.memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
    return {"processes": len(procs), "rss_sum_mb": round(rss / 2**20, 1), "pss_sum_mb": round(pss / 2**20, 1)}


def sizes(conn) -> dict[str, float]:
    mb = 2**20
    row = conn.execute(
        "SELECT pg_relation_size('chunks') AS heap, pg_total_relation_size('chunks') AS total,"
        " coalesce(pg_relation_size(NULLIF(c.reltoastrelid, 0)), 0) AS toast,"
        " pg_indexes_size('chunks') AS indexes"
        " FROM pg_class c WHERE c.oid = 'chunks'::regclass"
    ).fetchone()
    out = {
        "chunks_heap_mb": round(row["heap"] / mb, 1),
        "chunks_toast_mb": round(row["toast"] / mb, 1),
        "chunks_all_indexes_mb": round(row["indexes"] / mb, 1),
        "chunks_total_mb": round(row["total"] / mb, 1),
    }
    for name in hnsw_indexes(conn):
        out[f"index_{name}_mb"] = round(
            conn.execute("SELECT pg_relation_size(%s::regclass) AS s", (name,)).fetchone()["s"] / mb, 1
        )
    return out


# -------------------------------------------------------------------------------- ground truth
def exact_top(queries: np.ndarray, vectors: np.ndarray, mask: np.ndarray, k: int = K) -> list[list[int]]:
    """Row numbers (within the tenant) of each query's ``k`` nearest visible rows by cosine
    (unit vectors: the dot product), best first; numpy, not the database."""
    idx = np.flatnonzero(mask)
    sub = vectors[idx]
    out = []
    for s in range(0, len(queries), 32):
        sims = queries[s : s + 32] @ sub.T
        kk = min(k, sub.shape[0])
        part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
        for r, cols in enumerate(part):
            best = cols[np.argsort(-sims[r, cols])]
            out.append([int(idx[c]) for c in best])
    return out


def recall(hits: list[tuple[str, int]], truth: list[int]) -> float:
    want = {(f"doc-{i // CHUNKS_PER_DOC}", i % CHUNKS_PER_DOC) for i in truth}
    if not want:
        return 1.0 if not hits else 0.0
    return len(want & set(hits[:K])) / len(want)


# ------------------------------------------------------------------------------------ searches
def settings_for(settings, ef: int | None = None, storage: str | None = None, exact: bool | None = None):
    """A copy of ``settings`` with the retrieval knobs of one case (None: the default);
    ``exact=False`` turns the exact path off (HNSW for every tenant)."""
    upd: dict = {}
    if ef is not None:
        upd["vector_hnsw_ef_search"] = ef
    if storage is not None:
        upd["vector_index"] = storage
    if exact is False:
        upd["vector_exact_search_max_rows"] = 0
    return settings.overridden(**upd)


class _Explain:
    """Stands in for a connection: the vector statement (the one holding ``<=>``) is EXPLAINed
    instead of run, every other statement runs as given; the plan shows which index served."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.plan = ""

    def execute(self, sql, params=None, **kw):
        if "<=>" in str(sql):
            rows = self.conn.execute("EXPLAIN " + sql, params, **kw).fetchall()
            self.plan = "\n".join(r["QUERY PLAN"] for r in rows)

            class _Empty:
                def fetchall(self):
                    return []

                def fetchone(self):
                    return None

            return _Empty()
        return self.conn.execute(sql, params, **kw)

    def __getattr__(self, name):
        return getattr(self.conn, name)


def _request(tenant: str, qvec: np.ndarray, groups: list[str]):
    from ragline.shared.sdk.contracts import SearchRequest

    return SearchRequest(
        query="", tenant=tenant, groups=groups, k=K, mode="vector", query_vector=[float(x) for x in qvec]
    )


def direct(
    tenant: str, groups: list[str], qvec: np.ndarray, settings, explain: bool = False
) -> tuple[float, list[tuple[str, int]], str, str]:
    """One vector search as the retrieval task runs it (``set_transaction_params`` reads the
    tenant's and the caller's counts, ``vector_path`` picks the path, ``vector_rows``), as the query
    pool's role: ms, the first K keys, the path taken, and the plan when asked."""
    from ragline.query.retrieval.retrievers import vector_rows
    from ragline.query.retrieval.transaction import read_only_transaction, set_transaction_params
    from ragline.shared.worker import db

    req = _request(tenant, qvec, groups)
    n = max(LIST_DEPTH, K)
    plan = ""
    t = time.perf_counter()
    with db.query_connection() as conn, read_only_transaction(conn):
        c = _Explain(conn) if explain else conn
        limit = set_transaction_params(c, req, settings, n)
        path = limit.vector_path(settings)
        rows = vector_rows(c, req, qvec, n, settings, path)
        if explain:
            plan = re.sub(r"'\[[-0-9e.,]+\]'", "'<qvec>'", c.plan)
    return (time.perf_counter() - t) * 1000, [(r["doc_id"], r["chunk_no"]) for r in rows[:K]], path, plan


def _queued(tenant: str, groups: list[str], qvec: np.ndarray) -> tuple[float, list[tuple[str, int]]]:
    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker.celery_app import app

    payload = _request(tenant, qvec, groups).model_dump(exclude_defaults=True)
    payload.update(mode="vector", groups=groups)
    t = time.perf_counter()
    res = app.send_task(TASK_QUERY_RETRIEVE, args=[payload]).get(timeout=120)
    ms = (time.perf_counter() - t) * 1000
    if "hits" not in res:
        raise RuntimeError(f"retrieve task failed: {res}")
    return ms, [(h["doc_id"], h["chunk_no"]) for h in res["hits"]]


def _save_partial(raw: dict) -> None:
    """With ``RAGLINE_BENCH_SCALE_PARTIAL`` set, what has been measured so far, after each phase (a
    long run that fails late still leaves its numbers)."""
    path = os.environ.get("RAGLINE_BENCH_SCALE_PARTIAL")
    if path:
        import json

        Path(path).write_text(json.dumps(raw, indent=1, default=float))


def _path_note(case: dict) -> str:
    """The paths a case's searches took, for a target's name: ``visible``, ``tenant 0.9 + hnsw 0.1``."""
    paths = case.get("paths") or {}
    total = sum(paths.values()) or 1
    if len(paths) == 1:
        return f"{next(iter(paths))} path"
    return " + ".join(f"{p} {n / total:.2g}" for p, n in sorted(paths.items()))


def _round(case: dict) -> dict:
    """One round's summary of a case."""
    return {k: case[k] for k in ("p50_ms", "p95_ms", "recall_at_10", "paths")}


def _measure_case(
    tenant: str, groups: list[str], queries: np.ndarray, truth: list[list[int]], warmup: int, settings
) -> dict:
    """``warmup`` unmeasured searches, then latency and recall@10 of the others, the share of them
    that took an exact path (the tenant's rows or the caller's documents) and the paths taken."""
    import psycopg

    for q in queries[:warmup]:
        direct(tenant, groups, q, settings)
    ms, recalls, paths, timeouts = [], [], Counter(), 0
    for q, want in zip(queries[warmup:], truth[warmup:], strict=True):
        try:
            took, hits, path, _ = direct(tenant, groups, q, settings)
        except psycopg.errors.QueryCanceled:  # the statement timeout: a result, recall 0 at the limit
            timeouts += 1
            took, hits, path = float(settings.deadlines.statement_timeout_ms), [], "timeout"
        ms.append(took)
        recalls.append(recall(hits, want))
        paths[path] += 1
    return {
        **common.latency_summary(ms),
        "recall_at_10": round(float(np.mean(recalls)), 4),
        "recall_min": round(float(np.min(recalls)), 4),
        "exact_path_share": round((paths["tenant"] + paths["visible"]) / len(ms), 3),
        "paths": dict(paths),
        "timeouts": timeouts,
    }


# ----------------------------------------------------------------------------------------- run
def run(
    out_dir: Path = common.RESULTS,
    n_chunks: int | None = None,
    n_queries: int = 100,
    warmup: int = 5,
    ef_values: tuple[int, ...] = (50, 100, 200, 400),
    queue_queries: int = 100,
    upsert_docs: int = 125,
    maintenance_work_mem: str = "4GB",
    parallel_workers: int = 1,
    cleanup: bool = False,
    seed: int = 23,
    rounds: int = 3,
) -> dict:
    from ragline.operations.index import drop_index, rebuild_index
    from ragline.query.retrieval.transaction import tenant_rows
    from ragline.query.retrieval.vector_index import INDEX_NAMES
    from ragline.shared.config.settings import get_settings
    from ragline.shared.worker import db

    n_chunks = n_chunks or int(os.environ.get("RAGLINE_BENCH_SCALE_N", "1000000"))
    settings = get_settings()
    prefix = f"bench-scale-{int(time.time())}"
    tenants = _tenants(prefix, n_chunks)
    space = EmbeddingSpace()
    rng = np.random.default_rng(seed)
    texts = [f"синтетический фрагмент {i}" for i in range(1000)]
    with db.connection() as c:
        desc = common.machine(c)
        pg_conf = {
            k: c.execute(f"SELECT current_setting('{k}') AS v").fetchone()["v"]
            for k in ("shared_buffers", "work_mem", "max_worker_processes", "max_parallel_workers")
        }
    raw: dict = {"postgres_settings": pg_conf, "load": {}, "cases": {}}
    notes: list[str] = []

    # ---- 1. load: COPY with every HNSW index dropped, then build
    t = time.perf_counter()
    data = {label: _sample(space, rows, rng) for label, (_, rows) in tenants.items()}
    acls = {
        label: [doc_acl(d, rng) for d in range(rows // CHUNKS_PER_DOC)]
        for label, (_, rows) in tenants.items()
    }
    raw["load"]["generate_s"] = round(time.perf_counter() - t, 2)
    raw["load"]["structure"] = structure_stats(data["0.1%"] if n_chunks < 50_000 else data["9%"], rng)
    queries = _sample(space, warmup + n_queries, np.random.default_rng(seed + 1))

    conn = db.connect()
    original = hnsw_indexes(conn)
    try:
        for name in original:
            conn.execute(f"DROP INDEX {name}")
        t = time.perf_counter()
        with conn.transaction():
            # one transaction, as a bulk load would; the BM25 counters are written by the statement
            # trigger of migration 0012, once per COPY (0009's row trigger made this quadratic)
            for label, (tenant, _) in tenants.items():
                load_chunks(conn, tenant, data[label], [], CHUNKS_PER_DOC, texts=texts, doc_acls=acls[label])
            raw["load"]["copy_s"] = round(time.perf_counter() - t, 2)
        # what the exact-path planner will read for each tenant
        raw["load"]["tenant_rows_counted"] = {
            label: tenant_rows(conn, tenant) for label, (tenant, _) in tenants.items()
        }
        raw["load"]["copy_rows_per_s"] = round(n_chunks / raw["load"]["copy_s"], 1)
        raw["load"]["rows"] = {label: rows for label, (_, rows) in tenants.items()}
        raw["load"]["visible_rows"] = {
            f"{label}|{acl}": int(sum(CHUNKS_PER_DOC for a in acls[label] if set(a) & set(groups)))
            for label in tenants
            for acl, groups in ACL_CASES.items()
        }
        # what the planner reads for each case: the caller-scoped counters of migration 0017
        raw["load"]["visible_rows_counted"] = {
            f"{label}|{acl}": visible_rows(conn, tenant, groups)
            for label, (tenant, _) in tenants.items()
            for acl, groups in ACL_CASES.items()
        }
        t = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) chunks")
        conn.execute("VACUUM (ANALYZE) documents")
        raw["load"]["vacuum_analyze_s"] = round(time.perf_counter() - t, 2)
        raw["load"]["total_chunks_in_table"] = conn.execute("SELECT count(*) AS n FROM chunks").fetchone()[
            "n"
        ]
        raw["load"]["sizes_before_hnsw"] = sizes(conn)
        raw["load"]["postgres_memory_after_copy"] = postgres_memory(conn)
        _save_partial(raw)

        truth = {
            (label, acl): exact_top(
                queries,
                data[label],
                np.repeat([bool(set(a) & set(ACL_CASES[acl])) for a in acls[label]], CHUNKS_PER_DOC),
            )
            for label in tenants
            for acl in ACL_CASES
        }

        # ---- 2. per storage: build (the product's `ragline index rebuild`, keeping the other kind),
        # sizes, the ef_search curve on the HNSW path, and the defaults (exact path for small tenants)
        raw["builds"] = {}
        conn.execute(
            "SELECT set_config('max_parallel_maintenance_workers', %s, false)", (str(parallel_workers),)
        )
        for storage in STORAGES:
            common.checkpoint()
            build = rebuild_index(
                conn, storage, space.dim, keep_old=True, maintenance_work_mem=maintenance_work_mem
            )
            build.update(
                maintenance_work_mem=maintenance_work_mem,
                max_parallel_maintenance_workers=parallel_workers,
                size_mb=round(
                    conn.execute("SELECT pg_relation_size(%s::regclass) AS s", (build["built"],)).fetchone()[
                        "s"
                    ]
                    / 2**20,
                    1,
                ),
            )
            conn.execute("VACUUM (ANALYZE) chunks")
            common.checkpoint()
            build["sizes_after"] = sizes(conn)
            build["postgres_memory_after_build"] = postgres_memory(conn)
            raw["builds"][storage] = build
            _save_partial(raw)
            for label, (tenant, _) in tenants.items():
                for acl, groups in ACL_CASES.items():
                    for ef in ef_values if acl in CURVE_ACL else ():
                        raw["cases"][f"{storage}|{label}|{acl}|ef{ef}"] = {
                            "storage": storage,
                            "tenant": label,
                            "acl": acl,
                            "ef_search": ef,
                            "effective_ef_search": max(ef, LIST_DEPTH, K),
                            "exact_search_max_rows": 0,
                            # ragline's exact path is off, but Postgres may still plan the tenant index
                            "plan": direct(
                                tenant,
                                groups,
                                queries[0],
                                settings_for(settings, ef=ef, storage=storage, exact=False),
                                explain=True,
                            )[3],
                            **_measure_case(
                                tenant,
                                groups,
                                queries,
                                truth[(label, acl)],
                                warmup,
                                settings_for(settings, ef=ef, storage=storage, exact=False),
                            ),
                        }
                    s = settings_for(settings, storage=storage)
                    raw["cases"][f"{storage}|{label}|{acl}|default"] = {
                        "storage": storage,
                        "tenant": label,
                        "acl": acl,
                        "ef_search": settings.vector.hnsw_ef_search,
                        "exact_search_max_rows": settings.vector.exact_search_max_rows,
                        "plan": direct(tenant, groups, queries[0], s, explain=True)[3],
                        **_measure_case(tenant, groups, queries, truth[(label, acl)], warmup, s),
                    }
            # further rounds of the default cases, every case once per round, for the spread
            for _ in range(rounds - 1):
                for label, (tenant, _) in tenants.items():
                    for acl, groups in ACL_CASES.items():
                        case = raw["cases"][f"{storage}|{label}|{acl}|default"]
                        again = _measure_case(
                            tenant,
                            groups,
                            queries,
                            truth[(label, acl)],
                            warmup,
                            settings_for(settings, storage=storage),
                        )
                        case.setdefault("rounds", [_round(case)]).append(_round(again))
            for key, case in raw["cases"].items():
                if key.startswith(f"{storage}|") and key.endswith("|default"):
                    p95 = [r["p95_ms"] for r in case.setdefault("rounds", [_round(case)])]
                    case["p95_ms_median_of_rounds"] = round(float(np.median(p95)), 3)
                    case["p95_ms_range_of_rounds"] = [min(p95), max(p95)]
                    case["recall_min_of_rounds"] = min(r["recall_at_10"] for r in case["rounds"])
            raw["builds"][storage]["postgres_memory_after_queries"] = postgres_memory(conn)
            _save_partial(raw)

        # ---- 4. the small tenant with the exact path on (the defaults) and off (HNSW, same ef_search)
        default_storage = settings.vector.index
        ef_default = settings.vector.hnsw_ef_search
        raw["exact_path_small_tenant"] = {}
        for acl in ACL_CASES:
            on = raw["cases"][f"{default_storage}|0.1%|{acl}|default"]
            off = raw["cases"].get(f"{default_storage}|0.1%|{acl}|ef{ef_default}")
            raw["exact_path_small_tenant"][acl] = {
                "on": {k: on[k] for k in ("recall_at_10", "p50_ms", "p95_ms", "exact_path_share")},
                "off": {k: off[k] for k in ("recall_at_10", "p50_ms", "p95_ms", "exact_path_share")}
                if off
                else None,
            }

        # ---- 3. through the query queue: one solo worker process, default settings
        from bench import noop_worker
        from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE

        raw["queue"] = {}
        qs = queries[warmup : warmup + queue_queries]
        with (
            common.settings_env(workers_query_pool="solo", workers_query_concurrency=1),
            common.prefork_pools(
                {"query": (TASK_QUERY_RETRIEVE, _request("none", queries[0], []).model_dump())}
            ),
            noop_worker.bare_worker(),
        ):
            s = get_settings()
            for label in ("90%", "0.1%"):
                tenant = tenants[label][0]
                groups = ACL_CASES["all"]
                for q in queries[:warmup]:
                    _queued(tenant, groups, q)
                    direct(tenant, groups, q, s)
                    noop_worker.round_trip_ms()
                d_ms, q_ms, b_ms, rec = [], [], [], []
                for i, q in enumerate(qs):
                    # alternate which side runs first, so neither always finds the pages warm; the
                    # bare Celery round trip (no-op task, same pool kind) in between
                    if i % 2:
                        ms, hits = _queued(tenant, groups, q)
                        b_ms.append(noop_worker.round_trip_ms())
                        d_ms.append(direct(tenant, groups, q, s)[0])
                    else:
                        d_ms.append(direct(tenant, groups, q, s)[0])
                        b_ms.append(noop_worker.round_trip_ms())
                        ms, hits = _queued(tenant, groups, q)
                    q_ms.append(ms)
                    rec.append(recall(hits, truth[(label, "all")][warmup + i]))
                raw["queue"][label] = {
                    "storage": default_storage,
                    "direct_sql": common.latency_summary(d_ms),
                    "query_queue": common.latency_summary(q_ms),
                    "bare_celery_round_trip": common.latency_summary(b_ms),
                    "recall_at_10_queued": round(float(np.mean(rec)), 4),
                }

        _save_partial(raw)

        # ---- 4(b). steady ingestion into the live index (the product's store stage), one HNSW index
        from bench import upsert as ups

        dropped = [
            name
            for storage in STORAGES
            if storage != default_storage
            for name in drop_index(conn, storage, space.dim)
        ]
        common.checkpoint()
        utenant = f"{prefix}-steady"
        docs = ups._documents(utenant, upsert_docs, 40, texts, space, rng)
        seconds = ups._upsert(docs)
        stored = conn.execute("SELECT count(*) AS n FROM chunks WHERE tenant = %s", (utenant,)).fetchone()[
            "n"
        ]
        if stored != upsert_docs * 40:
            raise RuntimeError(f"steady upsert stored {stored} chunks, expected {upsert_docs * 40}")
        raw["steady_upsert"] = {
            "chunks": stored,
            "documents": upsert_docs,
            "seconds": round(seconds, 2),
            "chunks_per_s": round(stored / seconds, 1),
            "live_index": INDEX_NAMES[default_storage],
            "dropped_before": dropped,
            "rows_in_table_before": raw["load"]["total_chunks_in_table"],
        }
        raw["final_sizes"] = sizes(conn)
        raw["postgres_memory_end"] = postgres_memory(conn)
    finally:
        # leave the HNSW indexes as they were (the smoke test runs on the shared test database)
        current = hnsw_indexes(conn)
        for name in current:
            if name not in original:
                conn.execute(f"DROP INDEX IF EXISTS {name}")
        for name, definition in original.items():
            if name not in current or current[name] != definition:
                conn.execute(f"DROP INDEX IF EXISTS {name}")
                conn.execute(definition)
        if cleanup:
            for tenant in [t for t, _ in tenants.values()] + [f"{prefix}-steady"]:
                conn.execute("DELETE FROM documents WHERE tenant = %s", (tenant,))
        conn.close()

    # ---- 5. targets, at the default settings
    targets: list[common.Target] = []
    for label in tenants:
        for acl in ACL_CASES:
            c = raw["cases"][f"{default_storage}|{label}|{acl}|default"]
            targets.append(
                common.Target(
                    f"{label} tenant, groups {acl}: recall@10 at defaults (lowest of {len(c['rounds'])} rounds)",
                    c["recall_min_of_rounds"],
                    ">=",
                    0.95,
                )
            )
    for label in tenants:
        for acl in ACL_CASES:
            c = raw["cases"][f"{default_storage}|{label}|{acl}|default"]
            lo, hi = c["p95_ms_range_of_rounds"]
            targets.append(
                common.Target(
                    f"{label} tenant, groups {acl}: direct p95 at defaults, median of {len(c['rounds'])} rounds"
                    f" ({lo:.3g}–{hi:.3g}; {_path_note(c)})",
                    c["p95_ms_median_of_rounds"],
                    "<=",
                    CASE_P95_MS,
                    "ms",
                )
            )
    big = raw["cases"][f"{default_storage}|90%|all|default"]
    for label, q in raw["queue"].items():
        q["queue_overhead"], target = common.queue_overhead(
            f"{label} tenant",
            q["query_queue"]["p95_ms"],
            q["direct_sql"]["p95_ms"],
            q["bare_celery_round_trip"]["p95_ms"],
        )
        targets.append(target)
    for acl in ACL_CASES:
        small = raw["cases"][f"{default_storage}|0.1%|{acl}|default"]
        targets.append(
            common.Target(
                f"0.1% tenant, groups {acl}: recall@10 at defaults (exact path share {small['exact_path_share']:g})",
                small["recall_at_10"],
                ">=",
                1.0,
            )
        )
    small = raw["cases"][f"{default_storage}|0.1%|all|default"]
    targets.append(
        common.Target(
            "0.1% tenant p95 <= 90% tenant p95 (defaults)", small["p95_ms"], "<=", big["p95_ms"], "ms"
        )
    )
    targets.append(
        common.Target(
            "steady upsert into the live index (store stage), chunks/s",
            raw["steady_upsert"]["chunks_per_s"],
            ">=",
            STEADY_BASELINE,
            "chunks/s",
            note="bench d's whole-pipeline re-ingest rate (12,767 chunks in ~50 s); the store stage bounds the pipeline",
        )
    )

    params = {
        "n_chunks": n_chunks,
        "tenants": {label: rows for label, (_, rows) in tenants.items()},
        "chunks_per_doc": CHUNKS_PER_DOC,
        "acl_cases": ACL_CASES,
        "n_queries": n_queries,
        "warmup": warmup,
        "ef_values": list(ef_values),
        "default_ef_search": settings.vector.hnsw_ef_search,
        "retrieval_top_n": LIST_DEPTH,
        "default_storage": default_storage,
        "default_exact_search_max_rows": settings.vector.exact_search_max_rows,
        "queue_queries": queue_queries,
        "rounds": rounds,
        "queue_worker": "ragline up's query pool: one solo process (RAGLINE_WORKERS_QUERY_POOL=solo, RAGLINE_WORKERS_QUERY_CONCURRENCY=1)",
        "upsert_chunks": upsert_docs * 40,
        "maintenance_work_mem": maintenance_work_mem,
        "max_parallel_maintenance_workers": parallel_workers,
        "space": {"dim": space.dim, "clusters": space.clusters, "rank": space.rank},
        "content": "short placeholder text (like bench c), 1,000 distinct strings cycled",
    }
    notes += [
        "Ground truth: numpy top-10 by cosine over the in-memory float32 vectors with the tenant and ACL"
        " masks; recall = |ANN top-10 ∩ exact top-10| / min(10, visible rows).",
        "Curve cases (…|efN) turn ragline's exact path off (threshold 0); Postgres may still plan the"
        " tenant index and a sort instead of the HNSW index (each case's plan shows which); effective_ef_search ="
        " max(ef_search, top_n) because the query module never searches with fewer candidates than it asks for.",
        "Latency: client-side ms of one read-only transaction on a pooled connection of the query pool's"
        " role (row-level security on), in this process; the queue side is the retrieve task's round trip.",
        "Indexes: COPY with every HNSW index dropped, then each kind built by the product's `ragline index"
        " rebuild --keep-old` (ragline.operations.index.rebuild_index: CREATE INDEX CONCURRENTLY, m 16, ef_construction"
        " 64) with the maintenance_work_mem and parallel workers in params; both kinds are on the table while"
        " the second is measured, each statement can use only its own kind's index (see each case's plan).",
        "Load: one transaction, the BM25 counters written by migration 0012's statement trigger (the 1M"
        " result on record predates it: 0009's row trigger was disabled for the COPY and the counts written"
        " once after, load.lexical_stats_s; with it on, a one-transaction COPY of 1M rows did not finish).",
        "Default cases (…|default): the product's defaults for ef_search and the exact-path threshold,"
        " applied by ragline.query.retrieval.transaction.vector_path to the tenant's chunks (lexical_stats) and the"
        " caller's (acl_group_rows, migration 0017): a tenant at or under it is sorted exactly (path"
        " 'tenant'), a caller who sees at most that many rows of a larger tenant is sorted exactly over"
        " the rows of its documents (path 'visible', documents' ACL index), any other through HNSW.",
        "Curve cases are measured for the ACL cases in CURVE_ACL only: with ragline's exact paths off, a"
        " hundredth of a large tenant is a walk of the tenant or a filtered HNSW scan of seconds a query.",
        "postgres memory: RSS counts shared buffers once per process that touched them; PSS splits them.",
        "steady_upsert: the pipeline's store stage (ingest/store.py upsert_document, one transaction per"
        " document of 40 chunks) into the live index, no embedder; a whole-pipeline rate is at most this.",
    ]
    result = common.result(NAME, TITLE, params, raw, targets, desc, notes)
    common.write_json(result, out_dir)
    plot(out_dir / f"{NAME}.png", raw, list(ef_values), n_chunks, targets)
    return result


def plot(path: Path, raw: dict, ef_values: list[int], n_chunks: int, targets: list[common.Target]) -> Path:
    """Recall@10 and p95 over ef_search: one line per storage and tenant, a row per ACL case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5), dpi=110)
    colors = dict(zip(SHARES, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=True))
    styles = {"vector": "-", "halfvec": "--"}
    for row, acl in enumerate(CURVE_ACL):
        for storage in STORAGES:
            for label in SHARES:
                cases = [raw["cases"].get(f"{storage}|{label}|{acl}|ef{ef}") for ef in ef_values]
                if not all(cases):
                    continue
                kw = {"color": colors[label], "linestyle": styles[storage], "marker": "o", "markersize": 3}
                axes[row][0].plot(
                    ef_values, [c["recall_at_10"] for c in cases], label=f"{storage} {label}", **kw
                )
                axes[row][1].plot(ef_values, [c["p95_ms"] for c in cases], label=f"{storage} {label}", **kw)
        axes[row][0].set_ylabel(f"recall@10 (groups {acl})")
        axes[row][1].set_ylabel(f"p95 ms (groups {acl})")
        axes[row][1].set_yscale("log")
        for ax in axes[row]:
            ax.set_xscale("log")
            ax.set_xticks(ef_values, [str(e) for e in ef_values])
            ax.set_xlabel("hnsw.ef_search (ragline's exact path off)")
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.grid(alpha=0.3)
    axes[0][0].axhline(0.95, color="grey", linewidth=0.8)
    axes[1][0].axhline(0.95, color="grey", linewidth=0.8)
    handles, labels = axes[0][1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, 0.955))
    fig.suptitle(f"{n_chunks:,} chunks, 384 dims: solid = vector, dashed = halfvec", fontsize=11)
    caption = "\n".join(
        f"{'PASS' if t.passed else 'FAIL'}  {t.name}: {t.measured:g} {t.op} {t.threshold:g}{(' ' + t.unit) if t.unit else ''}"
        for t in targets
    )
    fig.text(0.01, 0.01, caption, fontsize=7, family="monospace", va="bottom")
    fig.subplots_adjust(bottom=0.08 + 0.018 * len(targets), hspace=0.35, wspace=0.25)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
