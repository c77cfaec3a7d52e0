"""The vector search's path and index (pure parts): which path a tenant and a caller's share of it
take (exact over the tenant, exact over the caller's documents, HNSW), which expression orders the rows, which HNSW indexes serve which setting, what a rebuild replaces."""

from __future__ import annotations

import pytest

from ragline.operations.index import replaced_by
from ragline.query.retrieval.sql import (
    EXACT_ORDER,
    FIELDS,
    VECTOR_ORDER,
    VECTOR_SQL,
    VECTOR_TEMPLATES,
    render,
    vector_order,
)
from ragline.query.retrieval.transaction import vector_path
from ragline.query.retrieval.vector_index import INDEX_NAMES, definition, kind_of, problem_with
from ragline.shared.config.settings import Settings

VECTOR = {
    "name": "chunks_embedding_hnsw",
    "opclass": "vector_cosine_ops",
    "valid": True,
    "definition": "CREATE INDEX chunks_embedding_hnsw ON public.chunks USING hnsw (embedding vector_cosine_ops)"
    " WITH (m='16', ef_construction='64')",
}
HALFVEC = {
    "name": "chunks_embedding_hnsw_halfvec",
    "opclass": "halfvec_cosine_ops",
    "valid": True,
    "definition": "CREATE INDEX chunks_embedding_hnsw_halfvec ON public.chunks USING hnsw"
    " (((embedding)::halfvec(384)) halfvec_cosine_ops) WITH (m='16', ef_construction='64')",
}


def settings(**vector) -> Settings:
    return Settings.model_validate({"vector": vector})


@pytest.mark.parametrize(
    ("limit", "tenant", "visible", "path"),
    [
        # a tenant at or under the limit: its rows, whatever the caller sees of them
        (1000, 0, 0, "tenant"),
        (1000, 1000, 1000, "tenant"),
        (1000, 1000, 10, "tenant"),
        # a larger tenant: exact over the caller's documents while it sees at most the limit
        (1000, 1001, 1000, "visible"),
        (1000, 900_000, 9_000 // 9, "visible"),
        (1000, 900_000, 0, "visible"),  # no group matches: the documents index finds nothing, fast
        (1000, 1001, 1001, "hnsw"),
        (1000, 900_000, 90_000, "hnsw"),
        # the exact paths off, or counts not read
        (0, 1, 1, "hnsw"),
        (0, 900_000, 10, "hnsw"),
        (1000, None, None, "hnsw"),
        (1000, None, 10, "visible"),
        (1000, 10, None, "tenant"),
    ],
)
def test_the_path_follows_the_tenant_then_the_callers_rows(limit, tenant, visible, path):
    assert vector_path(settings(exact_search_max_rows=limit), tenant, visible) == path


def test_each_path_has_its_statement_and_only_hnsw_uses_the_index_order():
    assert VECTOR_TEMPLATES.get("hnsw", VECTOR_SQL) is VECTOR_SQL
    assert "documents d" in VECTOR_TEMPLATES["visible"] and "documents" not in VECTOR_TEMPLATES["tenant"]
    assert all("{scope}" in t for t in VECTOR_TEMPLATES.values())  # the chunks' own scope stays


@pytest.mark.parametrize("path", ["tenant", "visible"])
def test_an_exact_path_computes_each_rows_distance_once(path):
    """The exact paths read thousands of rows: each distance is computed once (the sort key is the
    sub-select's column, not the expression again), and the order is one no index serves."""
    statement = render(VECTOR_TEMPLATES[path], "", order=vector_order(settings(), exact=True))
    best = statement.split(f"SELECT {FIELDS}", 1)[0]
    assert best.count("<=>") == 1, best
    assert "ORDER BY s.distance" in best and "OFFSET 0" in best


def test_the_order_no_index_serves_and_the_configured_index_serves():
    assert vector_order(settings(), exact=True) == EXACT_ORDER
    assert vector_order(settings(), exact=False) == VECTOR_ORDER["vector"]
    halfvec = vector_order(settings(index="halfvec"), exact=False)
    assert halfvec == "c.embedding::halfvec(384) <=> %(qvec)s::halfvec(384)"
    assert "halfvec" not in vector_order(settings(index="halfvec"), exact=True)


def test_index_definitions_match_what_the_catalog_reports():
    assert definition("vector", 384, "x") == (
        "CREATE INDEX CONCURRENTLY x ON chunks USING hnsw (embedding vector_cosine_ops)"
        " WITH (m = 16, ef_construction = 64)"
    )
    assert "((embedding::halfvec(384)) halfvec_cosine_ops)" in definition("halfvec", 384, "x")
    assert kind_of(VECTOR, 384) == "vector"
    assert kind_of(HALFVEC, 384) == "halfvec"
    assert kind_of(HALFVEC, 1024) is None  # another dimension serves no statement


def test_a_setting_without_its_valid_index_is_a_problem():
    assert problem_with([VECTOR], "vector", 384) is None
    assert problem_with([VECTOR, HALFVEC], "halfvec", 384) is None
    missing = problem_with([VECTOR], "halfvec", 384)
    assert (
        missing and "ragline index rebuild --type halfvec" in missing and "chunks_embedding_hnsw" in missing
    )
    assert problem_with([{**HALFVEC, "valid": False}], "halfvec", 384)
    assert "none" in problem_with([], "vector", 384)


def test_a_rebuild_replaces_the_same_kind_and_the_other_unless_kept():
    assert replaced_by([VECTOR], "halfvec", 384, keep_old=False) == [VECTOR["name"]]
    assert replaced_by([VECTOR], "halfvec", 384, keep_old=True) == []
    assert replaced_by([VECTOR, HALFVEC], "halfvec", 384, keep_old=True) == [HALFVEC["name"]]
    assert replaced_by([VECTOR, HALFVEC], "vector", 384, keep_old=False) == [VECTOR["name"], HALFVEC["name"]]
    unrelated = {**VECTOR, "name": "my_index", "definition": "... USING hnsw (other vector_l2_ops)"}
    assert replaced_by([unrelated], "vector", 384, keep_old=False) == []
    assert set(INDEX_NAMES) == {"vector", "halfvec"}
