"""Query planning of the vector search: a small tenant is searched exactly (tenant index, sort, no
HNSW) and gets the exact top k where filtered HNSW misses rows; a large one walks the HNSW index.
The index's storage (``vector`` / ``halfvec``) is rebuilt concurrently while searches keep
answering, and a setting that disagrees with the database's index is named, not seq-scanned."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest
from typer.testing import CliRunner

from bench.synthetic import EmbeddingSpace, load_chunks
from ragline.cli import app as cli
from ragline.query.retrieval import retrievers, transaction
from ragline.query.retrieval import search as retrieval_search
from ragline.query.retrieval.vector_index import INDEX_NAMES, problem
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker import db

BIG, SMALL, K = 4000, 150, 10
BIG_TENANT, SMALL_TENANT = "t-planning-big", "t-planning-small"
GROUPS = ["staff"]


class Explained:
    """A connection whose statements are explained instead of run (the plan the search gets)."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def execute(self, sql: str, params: dict):
        return self.conn.execute("EXPLAIN (FORMAT JSON) " + sql, params)


@pytest.fixture(scope="module")
def corpus(stack):
    """A big and a small tenant of clustered unit vectors, the questions, and each tenant's vectors
    in load order (``doc-{i // 10}``, chunk ``i % 10``) for the exact answers."""
    rng = np.random.default_rng(5)
    space = EmbeddingSpace(seed=5)
    vectors = {BIG_TENANT: space.sample(BIG, rng), SMALL_TENANT: space.sample(SMALL, rng)}
    with db.connection() as conn:
        for tenant, v in vectors.items():
            load_chunks(conn, tenant, v, GROUPS)
    return vectors, space.sample(12, rng)


def exact_top(vectors: np.ndarray, q: np.ndarray) -> list[tuple[str, int]]:
    order = np.argsort(-(vectors @ q), kind="stable")[:K]
    return [(f"doc-{i // 10}", int(i % 10)) for i in order]


def request(tenant: str, q: np.ndarray) -> SearchRequest:
    return SearchRequest(query="", tenant=tenant, groups=GROUPS, k=K, mode="vector", query_vector=q.tolist())


def search(tenant: str, q: np.ndarray, conn=None):
    from ragline.shared.config.settings import get_settings

    if conn is not None:
        return retrieval_search.search(conn, request(tenant, q), q, get_settings())
    with db.query_connection() as conn:
        return retrieval_search.search(conn, request(tenant, q), q, get_settings())


def recall(tenant: str, vectors: np.ndarray, queries: np.ndarray, conn=None) -> float:
    found = 0
    for q in queries:
        hits = search(tenant, q, conn).hits
        found += len({(h.doc_id, h.chunk_no) for h in hits} & set(exact_top(vectors, q)))
    return found / (K * len(queries))


@contextmanager
def as_in_a_million_rows():
    """A query-role connection that plans and walks a table of a few thousand rows the way a
    million-row index treats a tenant of a few hundred: the planner walks the HNSW index (a small
    table's planner may sort the tenant anyway), and the walk gives up after ``max_scan_tuples``
    before it met k of the tenant's rows (a 0.1% tenant needs ~1000 tuples per row found). The
    exact path has no other plan than its sort, and no walk to give up."""
    with db.query_connection() as conn:
        conn.execute("SET enable_sort = off")
        conn.execute("SET hnsw.max_scan_tuples = 100")
        conn.commit()
        try:
            yield conn
        finally:
            conn.rollback()
            conn.execute("RESET enable_sort")
            conn.execute("RESET hnsw.max_scan_tuples")
            conn.commit()


def test_small_tenant_gets_the_exact_top_k(corpus, use_settings, monkeypatch):
    vectors, queries = corpus
    monkeypatch.setattr(retrieval_search, "LIST_DEPTH", K)
    with as_in_a_million_rows() as conn:
        use_settings(vector_hnsw_ef_search=1, vector_exact_search_max_rows=0)
        hnsw = recall(SMALL_TENANT, vectors[SMALL_TENANT], queries, conn)
        use_settings(vector_hnsw_ef_search=1, vector_exact_search_max_rows=SMALL)
        exact = recall(SMALL_TENANT, vectors[SMALL_TENANT], queries, conn)
        q = queries[0]
        hits = search(SMALL_TENANT, q, conn).hits
    assert exact == 1.0
    assert hnsw < 1.0  # the exact path, not luck, found the rows HNSW missed
    expected = 1.0 - np.sort(vectors[SMALL_TENANT] @ q)[::-1][:K]
    assert [h.vector_distance for h in hits] == pytest.approx(expected.tolist(), abs=1e-5)


def plan(conn, tenant: str, q: np.ndarray, settings) -> tuple[int, str]:
    """The tenant's count as the transaction's first round trip reads it, and the vector
    statement's plan on the path it picks."""
    req = request(tenant, q)
    with conn.transaction():
        limit = transaction.set_transaction_params(conn, req, settings, K)
        text = json.dumps(
            retrievers.vector_rows(Explained(conn), req, q, K, settings, limit.vector_path(settings))
        )
    return limit.tenant_rows, text


def test_the_small_tenant_never_walks_hnsw_and_the_big_one_does(corpus, use_settings):
    from ragline.shared.config.settings import get_settings

    _, queries = corpus
    use_settings(vector_exact_search_max_rows=1000)
    settings = get_settings()
    with db.connection() as owner:
        # statistics that know the big tenant's size in a database the whole suite shares
        # (test_named_files_index.py explains it); reset below
        owner.execute("ALTER TABLE chunks ALTER COLUMN tenant SET STATISTICS 10000")
        owner.execute("ANALYZE chunks")
        owner.commit()
        try:
            with db.query_connection() as role:
                for conn in (owner, role):  # the table's owner, and the query role under row-level security
                    rows, small = plan(conn, SMALL_TENANT, queries[0], settings)
                    assert rows == SMALL
                    assert "hnsw" not in small and "chunks_tenant" in small, small
                    rows, big = plan(conn, BIG_TENANT, queries[0], settings)
                    assert rows == BIG
                    assert INDEX_NAMES["vector"] in big, big
            # and where the planner would rather walk the index, the small tenant's statement cannot
            with as_in_a_million_rows() as role:
                _, small = plan(role, SMALL_TENANT, queries[0], settings)
                assert "hnsw" not in small and "chunks_tenant" in small, small
                _, big = plan(role, BIG_TENANT, queries[0], settings)
                assert INDEX_NAMES["vector"] in big, big
        finally:
            owner.rollback()
            owner.execute("ALTER TABLE chunks ALTER COLUMN tenant SET STATISTICS -1")
            owner.commit()


def test_vector_rows_counts_the_tenant_when_not_told(corpus, use_settings):
    """Callers that run the statement alone (benchmarks) get the same path as the search."""
    from ragline.shared.config.settings import get_settings

    vectors, queries = corpus
    use_settings(vector_hnsw_ef_search=1, vector_exact_search_max_rows=SMALL)
    settings = get_settings()
    with as_in_a_million_rows() as conn, transaction.read_only_transaction(conn):
        req = request(SMALL_TENANT, queries[1])
        transaction.set_transaction_params(conn, req, settings, K)
        rows = retrievers.vector_rows(conn, req, queries[1], K, settings)
    assert [(r["doc_id"], r["chunk_no"]) for r in rows] == exact_top(vectors[SMALL_TENANT], queries[1])


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_halfvec_rebuild_while_searches_answer(corpus, use_settings):
    from ragline.shared.config.settings import get_settings

    vectors, queries = corpus
    dim = get_settings().embed.dim
    use_settings(vector_index="halfvec", vector_exact_search_max_rows=0)
    with db.connection() as conn:
        found = problem(conn, "halfvec", dim)
    assert found and "ragline index rebuild --type halfvec" in found
    status = invoke("index", "status", "--json")
    assert status.exit_code == 1 and json.loads(status.stdout)["problem"] == found

    # searches of the configured (vector) index go on from another thread during the rebuild
    use_settings(vector_exact_search_max_rows=0)
    answered, failed, stop = [], [], threading.Event()

    def searching() -> None:
        i = 0
        while not stop.is_set():
            try:
                hits = search(BIG_TENANT, queries[i % len(queries)]).hits
                answered.append((time.monotonic(), len(hits)))
            except Exception as exc:  # noqa: BLE001 - the assertion below shows it
                failed.append(repr(exc))
            i += 1

    worker = threading.Thread(target=searching)
    worker.start()
    try:
        started = time.monotonic()
        built = invoke("index", "rebuild", "--type", "halfvec", "--keep-old", "--json")
        finished = time.monotonic()
    finally:
        stop.set()
        worker.join()
    try:
        assert built.exit_code == 0, built.output
        assert json.loads(built.stdout)["dropped"] == []
        assert not failed and {n for _, n in answered} == {K}, (failed, answered)
        assert any(started < t < finished for t, _ in answered)  # answered while the index was built

        use_settings(vector_index="halfvec", vector_exact_search_max_rows=0)
        settings = get_settings()
        assert invoke("index", "status").exit_code == 0
        # the statement can walk the new index; whether the planner would rather sort a tenant of
        # 4,000 rows depends on statistics the whole suite's writes move, so sorting is priced out
        with as_in_a_million_rows() as role:
            _, text = plan(role, BIG_TENANT, queries[0], settings)
        assert INDEX_NAMES["halfvec"] in text, text
        # the reported distances are the full-precision ones, whichever index found the rows
        q = queries[0]
        hits = search(BIG_TENANT, q).hits
        by_key = {
            (f"doc-{i // 10}", int(i % 10)): 1.0 - float(vectors[BIG_TENANT][i] @ q) for i in range(BIG)
        }
        assert [h.vector_distance for h in hits] == pytest.approx(
            [by_key[(h.doc_id, h.chunk_no)] for h in hits], abs=1e-5
        )
        assert recall(BIG_TENANT, vectors[BIG_TENANT], queries) >= 0.9
        # the configured kind's index is not dropped by mistake
        assert invoke("index", "drop", "--type", "halfvec").exit_code == 1
    finally:
        use_settings(vector_index="vector")
        dropped = invoke("index", "drop", "--type", "halfvec")
    assert dropped.exit_code == 0 and INDEX_NAMES["halfvec"] in dropped.stdout
    with db.connection() as conn:
        assert problem(conn, "vector", dim) is None
        assert problem(conn, "halfvec", dim) is not None
