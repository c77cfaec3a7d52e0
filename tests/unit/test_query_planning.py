"""The vector search's path and index (pure parts): when a tenant is searched exactly, which
expression orders the rows, which HNSW indexes serve which setting, what a rebuild replaces."""

from __future__ import annotations

import pytest

from ragline.cli.index import replaced_by
from ragline.query.retrieve import EXACT_ORDER, VECTOR_ORDER, exact_search, vector_order
from ragline.query.vector_index import INDEX_NAMES, definition, kind_of, problem_with
from ragline.shared.settings import Settings

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


def settings(**retrieval) -> Settings:
    return Settings.model_validate({"retrieval": retrieval})


@pytest.mark.parametrize(
    ("limit", "rows", "exact"),
    [(1000, 0, True), (1000, 1000, True), (1000, 1001, False), (0, 1, False), (1000, None, False)],
)
def test_exact_search_up_to_the_limit(limit, rows, exact):
    assert exact_search(settings(exact_search_max_rows=limit), rows) is exact


def test_the_order_no_index_serves_and_the_configured_index_serves():
    assert vector_order(settings(), exact=True) == EXACT_ORDER
    assert vector_order(settings(), exact=False) == VECTOR_ORDER["vector"]
    halfvec = vector_order(settings(vector_index="halfvec"), exact=False)
    assert halfvec == "c.embedding::halfvec(384) <=> %(qvec)s::halfvec(384)"
    assert "halfvec" not in vector_order(settings(vector_index="halfvec"), exact=True)


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
