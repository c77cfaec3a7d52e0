"""Tiny versions of the benchmarks (``make bench``), so they cannot rot.

They run the real benchmark code on the test stack with the session worker and check the
structure and the behaviour of what they write (rows stored, recall in range, pass/fail
consistent with the numbers), never the timings.
"""

from __future__ import annotations

import importlib
import json
import operator

import pytest

from bench import common, run_all

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def external_worker(celery_worker, monkeypatch):
    monkeypatch.setattr(common, "EXTERNAL_WORKER", True)
    return celery_worker


def _check_result(data: dict, out_dir, name: str) -> dict:
    path = out_dir / f"{name}.json"
    assert json.loads(path.read_text()) == json.loads(json.dumps(data, default=float))
    assert (out_dir / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
    assert data["benchmark"] == name and data["raw"]
    m = data["machine"]
    assert m["cpu_count"] >= 1 and len(m["load_average_start"]) == 3 and "shared" in m["note"]
    assert m["postgres"] and m["pgvector"]
    assert data["targets"]
    ops = {">=": operator.ge, "<=": operator.le}
    for t in data["targets"]:
        assert t["passed"] is ops[t["op"]](t["measured"], t["threshold"]), t
    assert data["passed"] is all(t["passed"] for t in data["targets"])
    return data


@pytest.mark.slow
def test_upsert_smoke(external_worker, tmp_path):
    from bench import upsert

    data = _check_result(upsert.run(out_dir=tmp_path, **upsert.SMOKE), tmp_path, "upsert")
    raw = data["raw"]
    assert len(raw["upsert_rows_per_s"]) == len(raw["copy_rows_per_s"]) == upsert.SMOKE["rounds"]
    assert all(x > 0 for x in raw["upsert_rows_per_s"] + raw["copy_rows_per_s"])
    assert raw["ratio"] == pytest.approx(
        raw["upsert_median_rows_per_s"] / raw["copy_median_rows_per_s"], rel=1e-3
    )


@pytest.mark.slow
def test_retrieval_smoke(external_worker, tmp_path):
    from bench import retrieval

    data = _check_result(retrieval.run(out_dir=tmp_path, **retrieval.SMOKE), tmp_path, "retrieval")
    scenarios = data["raw"]["scenarios"]
    assert set(scenarios) == {"99% tenant", "1% tenant"}
    for s in scenarios.values():
        assert 0.0 <= s["recall_at_10"] <= 1.0
        assert s["direct_sql"]["n"] == s["query_queue"]["n"] == retrieval.SMOKE["n_queries"]
        assert s["recall_queries"] == retrieval.SMOKE["recall_queries"]
        assert "chunks" in s["plan"]  # EXPLAIN of the task's own statement ran
    assert len(data["targets"]) == 4


@pytest.mark.slow
def test_local_embedder_smoke(external_worker, tmp_path):
    from bench import local_embedder

    data = _check_result(
        local_embedder.run(out_dir=tmp_path, **local_embedder.SMOKE), tmp_path, "local_embedder"
    )
    raw = data["raw"]
    assert raw["texts"] >= local_embedder.SMOKE["n_docs"]
    assert raw["pipeline_texts_per_s"] > 0 and all(v > 0 for v in raw["direct_texts_per_s"].values())
    assert sum(r["texts"] for r in raw["rounds"]) == raw["texts"] and len(raw["rounds"]) == 2


@pytest.mark.slow
def test_acl_sync_smoke(external_worker, tmp_path):
    from bench import acl_sync

    data = _check_result(acl_sync.run(out_dir=tmp_path, **acl_sync.SMOKE), tmp_path, "acl_sync")
    raw = data["raw"]
    n = acl_sync.SMOKE["n_docs"]
    assert raw["acl_sync_result"]["documents_updated"] == n and raw["chunks"] >= n
    assert raw["acl_sync_embed_requests"] == 0  # the sync never calls the embedder
    assert raw["reingest_embed_requests"] >= 1 and raw["reingest_texts_embedded"] == raw["chunks"]
    assert raw["reingest_cached_embed_requests"] == 0  # same texts: every vector from the cache


@pytest.mark.slow
def test_ingest_throughput_smoke(external_worker, tmp_path):
    from bench import ingest_throughput as it

    data = _check_result(it.run(out_dir=tmp_path, **it.SMOKE), tmp_path, "ingest_throughput")
    (lat,), storm = data["raw"]["latency"], data["raw"]["storm_429"]
    assert lat["documents_failed"] == storm["documents_failed"] == 0, (lat["errors"], storm["errors"])
    # tasks packed to whole embedding batches: one full request per task
    assert lat["chunks"] == lat["chunks_expected"] == it.SMOKE["latency_requests"] * it.SMOKE["batch_size"]
    assert lat["server"]["requests"] == lat["tasks"] == it.SMOKE["latency_requests"]
    assert lat["server"]["texts_embedded"] == lat["chunks"]  # every chunk embedded once, none from the cache
    assert lat["server"]["max_in_flight"] <= 4
    assert storm["chunks"] == storm["chunks_expected"] and storm["server"]["answered_429"] >= 1
    assert storm["server"]["texts_embedded"] == storm["chunks"]  # 429s retried, nothing lost or doubled
    assert storm["steady_chunks"] == storm["chunks"]  # steady_after_s 0: every chunk counts


@pytest.mark.slow
def test_scale_smoke(external_worker, tmp_path):
    from bench import scale
    from ragline.shared.worker import db

    with db.connection() as c:
        before = scale.hnsw_indexes(c)
    data = _check_result(scale.run(out_dir=tmp_path, **scale.SMOKE), tmp_path, "scale")
    raw, smoke = data["raw"], scale.SMOKE
    settings = ("default", *(f"ef{ef}" for ef in smoke["ef_values"]))
    expected = {
        f"{s}|{t}|{a}|{k}"
        for s in scale.STORAGES
        for t in scale.SHARES
        for a in scale.ACL_CASES
        for k in settings
        if k == "default" or a in scale.CURVE_ACL
    }
    assert set(raw["cases"]) == expected
    for key, case in raw["cases"].items():
        assert 0.0 <= case["recall_at_10"] <= 1.0 and case["n"] == smoke["n_queries"], key
        assert "chunks" in case["plan"], key  # EXPLAIN of the query module's own statement ran
        # the curve forces HNSW; at this size every tenant is under the exact-path threshold
        assert case["exact_path_share"] == (1.0 if key.endswith("default") else 0.0), key
        assert set(case["paths"]) == ({"tenant"} if key.endswith("default") else {"hnsw"}), key
        if key.endswith("default"):
            assert case["recall_at_10"] == 1.0, key  # exact search over the tenant's visible rows
    for acl in scale.ACL_CASES:
        assert raw["exact_path_small_tenant"][acl]["on"]["recall_at_10"] == 1.0
    builds = raw["builds"]
    assert builds["vector"]["built"] != builds["halfvec"]["built"]
    assert 0 < builds["halfvec"]["size_mb"] < builds["vector"]["size_mb"]  # float16 graph: smaller
    assert raw["load"]["total_chunks_in_table"] >= sum(raw["load"]["rows"].values())
    visible = raw["load"]["visible_rows"]
    assert 0 < visible["90%|g100"] < visible["90%|g10"] < visible["90%|all"] == raw["load"]["rows"]["90%"]
    assert raw["load"]["tenant_rows_counted"] == raw["load"]["rows"]  # what the exact-path planner reads
    assert raw["load"]["visible_rows_counted"] == visible  # the caller-scoped counters of the COPY
    assert raw["load"]["postgres_memory_after_copy"]["rss_sum_mb"] > 0
    assert set(raw["queue"]) == {"90%", "0.1%"}
    assert all(q["recall_at_10_queued"] == 1.0 for q in raw["queue"].values())  # exact path via the task
    assert raw["steady_upsert"]["chunks"] == smoke["upsert_docs"] * 40
    with db.connection() as c:
        assert scale.hnsw_indexes(c) == before  # the shared test database keeps its indexes
        left = c.execute("SELECT count(*) AS n FROM documents WHERE tenant LIKE 'bench-scale-%'").fetchone()
        counted = c.execute(
            "SELECT coalesce(sum(docs), 0) AS n FROM lexical_stats WHERE tenant LIKE 'bench-scale-%'"
        ).fetchone()
        by_group = c.execute(
            "SELECT coalesce(sum(chunks), 0) AS n FROM acl_group_rows WHERE tenant LIKE 'bench-scale-%'"
        ).fetchone()
    # the COPY's counts were exactly what the deletes subtract
    assert left["n"] == 0 and counted["n"] == 0 and by_group["n"] == 0


@pytest.mark.slow
def test_bulk_load_smoke(external_worker, tmp_path):
    from bench import bulk_load
    from ragline.query.retrieval.vector_index import INDEX_NAMES, hnsw_indexes
    from ragline.shared.worker import db

    data = _check_result(bulk_load.run(out_dir=tmp_path, **bulk_load.SMOKE), tmp_path, "bulk_load")
    raw, smoke = data["raw"], bulk_load.SMOKE
    for case, n in (
        ("live", smoke["n_chunks"]),
        ("bulk", smoke["n_chunks"]),
        ("steady", smoke["steady_chunks"]),
    ):
        assert raw[case]["documents_failed"] == 0, raw[case]["errors"]
        assert raw[case]["chunks"] == n, case  # tasks of exactly `batch` chunks: nothing lost or doubled
    bulk = raw["bulk"]
    assert bulk["dropped"] == [INDEX_NAMES["vector"]] and bulk["build_s"] > 0
    assert bulk["rows_indexed"] >= raw["live"]["rows_in_table_after"] + smoke["n_chunks"]
    assert raw["steady"]["rows_in_table_before"] >= smoke["live_rows"]  # grown by the preload
    with db.connection() as c:
        assert [i["name"] for i in hnsw_indexes(c) if i["valid"]] == [INDEX_NAMES["vector"]]
        assert (
            c.execute("SELECT count(*) AS n FROM index_deferrals WHERE finished_at IS NULL").fetchone()["n"]
            == 0
        )
        left = c.execute("SELECT count(*) AS n FROM documents WHERE tenant LIKE 'bench-bulk-%'").fetchone()
    assert left["n"] == 0


def test_synthetic_vectors_have_structure():
    import numpy as np

    from bench.synthetic import EmbeddingSpace, structure_stats

    rng = np.random.default_rng(0)
    v = EmbeddingSpace().sample(2000, rng)
    assert v.shape == (2000, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    s = structure_stats(v, rng, sample=200)
    # neighbours far closer than random pairs: clustered, not uniform noise (where both are ~0)
    assert s["nn1_cosine"] > s["random_pair_cosine"] + 0.2 and s["random_pair_cosine"] > 0.2


def test_targets_percentiles_and_names():
    assert common.Target("x", 0.5, ">=", 0.5).passed and not common.Target("x", 0.49, ">=", 0.5).passed
    assert common.Target("y", 12, "<=", 12.5, "ms").passed and not common.Target("y", 13, "<=", 12.5).passed
    assert common.percentile([1, 2, 3, 4, 5], 50) == 3 and common.percentile([1.0, 2.0], 95) == pytest.approx(
        1.95
    )
    assert run_all.resolve(["c", "upsert"]) == ["retrieval", "upsert"]
    assert run_all.resolve([]) == list(run_all.BENCHMARKS.values())
    with pytest.raises(SystemExit):
        run_all.resolve(["nope"])


@pytest.mark.parametrize("name", sorted(run_all.BENCHMARKS.values()))
def test_every_benchmark_module_has_a_smoke_size(name):
    module = importlib.import_module(f"bench.{name}")
    assert module.NAME == name and module.TITLE and isinstance(module.SMOKE, dict) and callable(module.run)
