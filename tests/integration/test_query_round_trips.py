"""What a question costs the database beyond its statements: one connection of the query pool per
search (the collection's names and the search share it), and the count of rows awaiting their
vectors in the vector statement's round trip, with the same answers as when it was read on its
own: the hits, ``unembedded_rows`` and ``vector_share``, for a fully and a partly embedded scope,
on every vector path."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from bench.synthetic import EmbeddingSpace, load_chunks
from ragline.query import service
from ragline.query.retrieval import retrievers
from ragline.query.retrieval.search import LIST_DEPTH
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker import db

FULL, PARTLY = "t-round-trips-full", "t-round-trips-partly"
GROUPS = ["staff"]
ROWS, K = 120, 10
#: the chunks of PARTLY stored before their vectors: its first document's
PENDING = 10
#: a question with a name-like word (the collection-name statistics run) and one without
QUESTIONS = ("", "синтетический фрагмент ASVS")


@pytest.fixture(scope="module")
def corpus(stack):
    rng = np.random.default_rng(9)
    space = EmbeddingSpace(seed=9)
    with db.connection() as conn:
        for tenant in (FULL, PARTLY):
            load_chunks(conn, tenant, space.sample(ROWS, rng), GROUPS)
        conn.execute("UPDATE chunks SET embedding = NULL WHERE tenant = %s AND doc_id = 'doc-0'", (PARTLY,))
    return space.sample(4, rng)


def request(tenant: str, q: np.ndarray, question: str = "", mode: str = "vector") -> SearchRequest:
    return SearchRequest(
        query=question, tenant=tenant, groups=GROUPS, k=K, mode=mode, query_vector=q.tolist()
    )


def checkouts(run) -> int:
    """Connections the query pool handed out while ``run()`` ran."""
    pool = db.get_query_pool()
    pool.pop_stats()
    run()
    return int(pool.pop_stats().get("requests_num", 0))


@pytest.mark.parametrize("question", QUESTIONS, ids=["no-name", "a-name"])
@pytest.mark.parametrize("mode", ["vector", "hybrid", "lexical"])
def test_a_search_checks_out_one_connection(corpus, question, mode):
    q = corpus[0]
    service.search(request(FULL, q, question, mode))  # the pool is open, the statements prepared
    assert checkouts(lambda: service.search(request(FULL, q, question, mode))) == 1


class RoundTrips:
    """The libpq traces of the query pool's idle connections (the next search gets one of them):
    the frontend's messages between two of the server's ``ReadyForQuery``, one group per round
    trip. Statements are not prepared meanwhile, so each carries its text (a prepared one is
    sent by name only, and psycopg prepares one on its fifth run in a round trip of its own)."""

    def __enter__(self) -> RoundTrips:
        from psycopg.pq import Trace

        pool = db.get_query_pool()
        self.conns = [pool.getconn() for _ in range(pool.get_stats()["pool_available"])]
        self.files = []
        self.thresholds = [conn.prepare_threshold for conn in self.conns]
        for conn in self.conns:
            conn.prepare_threshold = None
            f = tempfile.NamedTemporaryFile(mode="w+", suffix=".trace", delete=False)
            conn.pgconn.trace(f.fileno())
            conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
            self.files.append(f)
        for conn in self.conns:
            pool.putconn(conn)
        return self

    def __exit__(self, *exc: object) -> None:
        for conn, f, threshold in zip(self.conns, self.files, self.thresholds, strict=True):
            conn.pgconn.untrace()
            conn.prepare_threshold = threshold
            f.close()

    def groups(self) -> list[list[str]]:
        out: list[list[str]] = []
        for f in self.files:
            with open(f.name, encoding="utf-8") as trace:
                lines = trace.read().splitlines()
            os.unlink(f.name)
            current: list[str] = []
            frontend = False  # the message a continuation line (a statement's next line) belongs to
            for line in lines:
                if "\tReadyForQuery" in line:
                    out.append(current)
                    current = []
                if line.startswith(("F\t", "B\t")):
                    frontend = line.startswith("F\t")
                    if frontend:
                        current.append(line)
                elif frontend and current:
                    current[-1] += "\n" + line
        return [g for g in out if g]


@pytest.mark.parametrize("tenant", [FULL, PARTLY])
def test_the_awaiting_rows_are_counted_in_the_vector_statements_round_trip(corpus, tenant):
    q = corpus[1]
    service.search(request(tenant, q))
    with RoundTrips() as trips:
        service.search(request(tenant, q))
    groups = trips.groups()
    vector = [g for g in groups if any("<=>" in line for line in g)]
    assert len(vector) == 1, groups
    assert any("embedding IS NULL" in line and "count(*)" in line for line in vector[0]), vector[0]
    # the liveness check of one checkout, BEGIN, the transaction's settings, the vector statement
    # with the count, and COMMIT; the scope's size only when rows await their vectors
    assert len(groups) == (6 if tenant == PARTLY else 5), groups


@pytest.mark.parametrize("path_rows", [0, ROWS], ids=["hnsw", "exact"])
@pytest.mark.parametrize("tenant", [FULL, PARTLY])
def test_coverage_and_hits_are_those_of_the_statements_run_one_by_one(
    corpus, use_settings, tenant, path_rows
):
    """The pipelined vector search against its statements run one after the other in a
    transaction of the same scope (:func:`retrievers.vector_rows`, :func:`retrievers.vector_coverage`)."""
    from ragline.query.retrieval.transaction import read_only_transaction, set_transaction_params
    from ragline.shared.config.settings import get_settings

    use_settings(vector_exact_search_max_rows=path_rows)
    settings = get_settings()
    for q in corpus:
        resp = service.search(request(tenant, q))
        req = request(tenant, q)
        with db.query_connection() as conn, read_only_transaction(conn):
            limit = set_transaction_params(conn, req, settings, max(LIST_DEPTH, K))
            rows = retrievers.vector_rows(
                conn,
                req,
                q.astype(np.float32),
                max(LIST_DEPTH, K),
                settings,
                limit.vector_path(settings),
            )
            unembedded, _, share = retrievers.vector_coverage(conn, req, settings)
        assert [(h.doc_id, h.chunk_no) for h in resp.hits] == [(r["doc_id"], r["chunk_no"]) for r in rows[:K]]
        assert (resp.unembedded_rows, resp.vector_share, resp.vectors_complete) == (
            unembedded,
            round(share, 6),
            not unembedded,
        )
        if tenant == PARTLY:
            assert unembedded == PENDING and 0 < share < 1
        else:
            assert (unembedded, share) == (0, 1.0)
