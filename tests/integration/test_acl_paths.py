"""The vector search's three paths on real Postgres, through ``search.search`` as the query role:
each returns the exact top k of the caller's rows for the cases it is chosen for (the tenant's rows
sorted, the caller's documents' rows sorted, HNSW for a large share), and the caller-scoped
counters it is chosen by (migration 0017) follow inserts, ACL updates and deletes of documents."""

from __future__ import annotations

import numpy as np
import pytest

from bench.synthetic import EmbeddingSpace, load_chunks
from ragline.query.retrieval import search as retrieval_search
from ragline.query.retrieval import sql, transaction
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker import db

TENANT, OTHER = "t-acl-paths", "t-acl-paths-other"
DOCS, PER_DOC, K = 300, 10, 10
#: a caller's groups -> its share of the tenant: every document, a tenth, a hundredth
CASES = {"all": ["all", "g10"], "g10": ["g10"], "g100": ["g100"]}


def doc_acl(d: int) -> list[str]:
    return ["g10" if d % 10 == 0 else "all"] + (["g100"] if d % 100 == 0 else [])


@pytest.fixture(scope="module")
def corpus(stack):
    """One tenant of clustered unit vectors with the three ACL shares, a second tenant holding the
    same groups (whose rows must never come back), and the questions."""
    rng = np.random.default_rng(31)
    space = EmbeddingSpace(seed=31)
    vectors = space.sample(DOCS * PER_DOC, rng)
    with db.connection() as conn:
        load_chunks(conn, TENANT, vectors, [], PER_DOC, doc_acls=[doc_acl(d) for d in range(DOCS)])
        load_chunks(conn, OTHER, space.sample(1000, rng), ["all", "g10", "g100"], PER_DOC)
        conn.execute("ANALYZE documents")
        conn.execute("ANALYZE chunks")
    return vectors, space.sample(6, rng)


def exact_top(vectors: np.ndarray, q: np.ndarray, groups: list[str]) -> list[tuple[str, int]]:
    """The caller's k nearest rows by cosine, by numpy over every row it may see."""
    visible = np.repeat([bool(set(doc_acl(d)) & set(groups)) for d in range(DOCS)], PER_DOC)
    idx = np.flatnonzero(visible)
    order = idx[np.argsort(-(vectors[idx] @ q), kind="stable")[:K]]
    return [(f"doc-{i // PER_DOC}", int(i % PER_DOC)) for i in order]


class Recorded:
    """A query-role connection that records the statements a search sends (the path it took)."""

    def __init__(self, conn) -> None:
        object.__setattr__(self, "conn", conn)
        object.__setattr__(self, "sql", [])

    def execute(self, sql, params=None, **kw):
        self.sql.append(str(sql))
        return self.conn.execute(sql, params, **kw)

    def __getattr__(self, name):
        return getattr(self.conn, name)

    def __setattr__(self, name, value):
        setattr(self.conn, name, value)


def path_of(statements: list[str]) -> str:
    vector = [s for s in statements if "<=>" in s]
    assert len(vector) == 1, vector
    if "documents d" in vector[0]:
        return "visible"
    return (
        "tenant" if sql.EXACT_ORDER.replace("%(qvec)s", "") in vector[0].replace("%(qvec)s", "") else "hnsw"
    )


def search(groups: list[str], q: np.ndarray) -> tuple[str, list[tuple[str, int]]]:
    from ragline.shared.config.settings import get_settings

    req = SearchRequest(query="", tenant=TENANT, groups=groups, k=K, mode="vector", query_vector=q.tolist())
    with db.query_connection() as conn:
        rec = Recorded(conn)
        hits = retrieval_search.search(rec, req, q, get_settings()).hits  # type: ignore[arg-type]
    return path_of(rec.sql), [(h.doc_id, h.chunk_no) for h in hits]


# (threshold, the caller's share): the path vector_path must pick, and it must be exact
MATRIX = [
    # the tenant (3,000 rows) under the threshold: its rows sorted, whatever the caller's share
    (DOCS * PER_DOC, "all", "tenant"),
    (DOCS * PER_DOC, "g10", "tenant"),
    (DOCS * PER_DOC, "g100", "tenant"),
    # a larger tenant: the caller's documents while the caller sees at most the threshold
    (400, "g10", "visible"),
    (400, "g100", "visible"),
    (30, "g100", "visible"),
    # the caller sees more than the threshold: HNSW (searched wide enough to be exhaustive here)
    (400, "all", "hnsw"),
    (0, "g10", "hnsw"),
]


@pytest.mark.parametrize(("threshold", "case", "path"), MATRIX)
def test_each_path_returns_the_exact_top_k_of_the_callers_rows(
    corpus, use_settings, monkeypatch, threshold, case, path
):
    vectors, queries = corpus
    monkeypatch.setattr(retrieval_search, "LIST_DEPTH", K)
    use_settings(vector_exact_search_max_rows=threshold, vector_hnsw_ef_search=1000)
    for q in queries:
        took, hits = search(CASES[case], q)
        assert took == path
        assert hits == exact_top(vectors, q, CASES[case])


def test_a_caller_without_a_matching_group_gets_nothing_on_every_path(corpus, use_settings):
    _, queries = corpus
    for threshold in (DOCS * PER_DOC, 400, 0):
        use_settings(vector_exact_search_max_rows=threshold)
        assert search(["nobody"], queries[0])[1] == []


def counted(conn, tenant: str) -> dict[str, int]:
    rows = conn.execute(
        "SELECT grp, sum(chunks)::int AS n FROM acl_group_rows WHERE tenant = %s GROUP BY grp HAVING sum(chunks) <> 0",
        (tenant,),
    ).fetchall()
    return {r["grp"]: r["n"] for r in rows}


def recounted(conn, tenant: str) -> dict[str, int]:
    rows = conn.execute(
        "SELECT g AS grp, sum(chunk_count)::int AS n FROM documents, unnest(acl) g WHERE tenant = %s GROUP BY g",
        (tenant,),
    ).fetchall()
    return {r["grp"]: r["n"] for r in rows if r["n"]}


def test_the_callers_counts_follow_every_write_of_documents(stack):
    """What ``vector_path`` reads equals a recount after a load (COPY), a permission change, a
    document's new size, a status change and deletes (one document, then the tenant)."""
    tenant = "t-acl-counts"
    rng = np.random.default_rng(2)
    vectors = EmbeddingSpace(seed=2).sample(200, rng)
    with db.connection() as conn:
        load_chunks(conn, tenant, vectors, [], 10, doc_acls=[doc_acl(d) for d in range(20)])
        assert counted(conn, tenant) == recounted(conn, tenant) == {"all": 180, "g10": 20, "g100": 10}
        conn.execute(
            "UPDATE documents SET acl = array_append(acl, 'auditors') WHERE tenant = %s AND doc_id IN ('doc-1', 'doc-2')",
            (tenant,),
        )
        conn.execute("UPDATE documents SET chunk_count = 4 WHERE tenant = %s AND doc_id = 'doc-3'", (tenant,))
        conn.execute("UPDATE documents SET status = 'failed' WHERE tenant = %s", (tenant,))  # nets to zero
        assert (
            counted(conn, tenant)
            == recounted(conn, tenant)
            == {"all": 174, "g10": 20, "g100": 10, "auditors": 20}
        )
        conn.execute("DELETE FROM documents WHERE tenant = %s AND doc_id = 'doc-0'", (tenant,))
        assert counted(conn, tenant) == recounted(conn, tenant) == {"all": 174, "g10": 10, "auditors": 20}
        conn.execute("DELETE FROM documents WHERE tenant = %s", (tenant,))
        assert counted(conn, tenant) == {}


def test_the_query_role_reads_only_its_own_groups_counts(corpus):
    from ragline.shared.config.settings import get_settings

    req = SearchRequest(query="", tenant=TENANT, groups=["g100"], k=K, mode="vector", query_vector=[0.0])
    with db.query_connection() as conn, transaction.read_only_transaction(conn):
        transaction.set_transaction_params(conn, req, get_settings(), K)
        rows = conn.execute("SELECT tenant, grp FROM acl_group_rows").fetchall()
    assert {(r["tenant"], r["grp"]) for r in rows} == {(TENANT, "g100")}
