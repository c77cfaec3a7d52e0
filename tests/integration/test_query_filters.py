"""The retrieval contract's filters on real Postgres: include/exclude, LIKE escaping, prefer
bonus, test penalty, layers, exact lookup, ACL, every ranking field on the rows."""

from __future__ import annotations

import pytest

from ragline.ingest.layers import LayerRules
from ragline.query import service
from ragline.query.retrieval.retrievers import lexical_rows
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import SearchRequest
from tests.integration.query_corpus import store_docs, vec

WORD = "ретраи"

DOCS = [
    {"doc_id": "pct", "path": "docs/100%_done/readme.md", "content": f"{WORD} после ошибки 429 в процентах"},
    {
        "doc_id": "lookalike",
        "path": "docs/100x-done/readme.md",
        "content": f"{WORD} после ошибки 429 похожий путь",
    },
    {
        "doc_id": "guide",
        "path": "docs/guide.md",
        "content": f"{WORD} и backoff: руководство",
        "page": 3,
        "heading": "Руководство › Ретраи",
    },
    {"doc_id": "main", "path": "src/app/main.py", "content": f"{WORD} в коде клиента"},
    {"doc_id": "unit", "path": "src/app/tests/test_main.py", "content": f"{WORD} {WORD} в тестах клиента"},
    {"doc_id": "underscore", "path": "src/app/main_test.py", "content": f"{WORD} {WORD} {WORD} тест"},
    {"doc_id": "secret", "path": "docs/secret.md", "content": f"{WORD} секретный документ", "acl": ["hr"]},
]


def stored_layer(doc: dict) -> str:
    """The layer ingestion gives the row: a source file's by its path (``ingest/layers.py``)."""
    rules = LayerRules.from_settings(get_settings().code)
    if doc["path"].endswith(".py"):
        return rules.document(doc["path"], code=True, requested="code")
    return doc.get("layer", "docs")


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, [{**d, "layer": stored_layer(d)} for d in DOCS])
    return tenant


def run(tenant: str, mode: str = "lexical", **kw):
    req = SearchRequest(
        query=kw.pop("query", WORD),
        tenant=tenant,
        groups=kw.pop("groups", ["g"]),
        mode=mode,
        k=kw.pop("k", 20),
        query_vector=vec(WORD).tolist() if mode != "lexical" else None,
        rerank=False,
        **kw,
    )
    return service.search(req)


def ids(resp) -> list[str]:
    return [h.doc_id for h in resp.hits]


@pytest.mark.parametrize("mode", ["hybrid", "vector", "lexical"])
def test_acl_and_tenant_in_where(corpus, mode):
    visible = ids(run(corpus, mode))
    assert "secret" not in visible and len(visible) == 6
    assert ids(run(corpus, mode, groups=["hr"])) == ["secret"]
    assert run(corpus, mode, groups=[]).hits == []
    assert run(corpus + "-other", mode).hits == []


def test_path_prefix_percent_and_underscore_are_literal(corpus):
    assert ids(run(corpus, path_prefixes=["docs/100%_done/"])) == ["pct"]
    assert set(ids(run(corpus, exclude_path_prefixes=["docs/100%_done/"]))) == {
        "lookalike",
        "guide",
        "main",
        "unit",
        "underscore",
    }
    # an unescaped "_" would make "src/app/main_" match "src/app/mainX" too; a prefix is literal text
    assert ids(run(corpus, path_prefixes=["src/app/main_"])) == ["underscore"]


def test_exclude_like_patterns_are_globs_with_literal_wildcards(corpus):
    got = set(ids(run(corpus, exclude_like_patterns=["*/tests/*", "*_test.py"])))
    assert got == {"pct", "lookalike", "guide", "main"}
    # "%" in a glob is a literal percent sign, not "anything"
    assert set(ids(run(corpus, exclude_like_patterns=["docs/100%*"]))) == {
        "lookalike",
        "guide",
        "main",
        "unit",
        "underscore",
    }


def test_layers(corpus):
    code = get_settings().code
    assert set(ids(run(corpus, layers=[code.source_layer]))) == {"main"}
    assert set(ids(run(corpus, layers=[code.source_layer, code.tests_layer]))) == {
        "main",
        "unit",
        "underscore",
    }
    assert run(corpus, layers=["nothing"]).hits == []


def test_prefer_bonus_and_test_penalty_change_the_order(corpus):
    from ragline.query.retrieval.ranking import PREFER_BONUS, TEST_PENALTY

    plain = run(corpus)
    # the test files repeat the word, so lexically they lead
    assert plain.hits[0].doc_id in {"unit", "underscore"}
    preferred = run(corpus, prefer_path_prefixes=["docs/guide"])
    top = preferred.hits[0]
    assert top.doc_id == "guide" and top.prefer_bonus == pytest.approx(PREFER_BONUS)
    assert top.score == pytest.approx(top.fused_score + PREFER_BONUS)
    glob = run(corpus, prefer_like_patterns=["*/main.py"])
    assert glob.hits[0].doc_id == "main"
    no_tests = run(corpus, prefer_non_tests=True)
    penalised = {h.doc_id: h.test_penalty for h in no_tests.hits}
    assert penalised["unit"] == penalised["underscore"] == pytest.approx(TEST_PENALTY)
    assert penalised["main"] == penalised["guide"] == 0.0
    assert {h.doc_id for h in no_tests.hits[-2:]} == {"unit", "underscore"}


@pytest.mark.parametrize("entry", ["hybrid", "vector", "lexical", "lexical_code", "exact", "expansion"])
def test_every_entry_point_s_hits_carry_the_path_preferences(corpus, conn, entry):
    """The preferences are the ranking policy's, from each row's path and layer, on every way a
    hit leaves retrieval: the three searches, the lexical code fallback, the exact lookup and the
    chunks the answer's expansion reads (``retrievers.document_chunks``)."""
    from ragline.query.retrieval.ranking import PREFER_BONUS, TEST_PENALTY
    from ragline.query.retrieval.retrievers import document_chunks

    code = get_settings().code
    prefer = {"prefer_like_patterns": ["src/*/main.py"], "prefer_non_tests": True}
    if entry == "expansion":
        req = SearchRequest(query=WORD, tenant=corpus, groups=["g"], **prefer)
        hits = document_chunks(conn, req, ["main", "unit", "guide"], get_settings(), 10)
    elif entry == "exact":
        hits = run(corpus, mode="exact", query="", doc_ids=["main", "unit", "guide"], **prefer).hits
    else:
        hits = run(corpus, mode=entry, **prefer).hits
    by_doc = {h.doc_id: h for h in hits}
    for h in hits:
        assert h.prefer_bonus == (PREFER_BONUS if h.path == "src/app/main.py" else 0.0), h.path
        assert h.test_penalty == (TEST_PENALTY if h.layer == code.tests_layer else 0.0), h.path
    assert by_doc["main"].prefer_bonus == PREFER_BONUS
    if entry != "lexical_code":  # the fallback reads the source layer alone
        assert by_doc["unit"].layer == code.tests_layer and by_doc["unit"].test_penalty == TEST_PENALTY


def test_rows_carry_every_ranking_field(corpus):
    resp = run(corpus, mode="hybrid", query=WORD)
    assert not resp.degraded
    guide = next(h for h in resp.hits if h.doc_id == "guide")
    assert guide.page == 3 and guide.heading == "Руководство › Ретраи" and guide.path == "docs/guide.md"
    assert guide.metadata == {"kind": "text"} and guide.layer == "docs"
    assert guide.vector_rank is not None and guide.vector_distance is not None
    assert guide.lexical_rank is not None and guide.lexical_score > 0
    assert guide.fused_score > 0 and guide.score == pytest.approx(guide.fused_score)
    assert {"vector", "lexical", "total"} <= set(resp.timings_ms)


def test_exact_lookup_drops_empty_paths_and_keeps_acl(corpus):
    resp = run(
        corpus,
        mode="exact",
        query="",
        doc_ids=["main"],
        paths=["", "   ", "./docs/guide.md", "docs/secret.md"],
    )
    assert ids(resp) == ["main", "guide"]  # order asked; secret is not visible to "g"
    assert all(h.vector_rank is None and h.lexical_rank is None for h in resp.hits)
    assert run(corpus, mode="exact", query="", paths=["", " "]).hits == []


def test_query_without_terms_runs_no_lexical_sql(corpus):
    req = SearchRequest(query="?! …", tenant=corpus, groups=["g"], mode="lexical")
    # no connection at all: the function must decide before touching the database
    assert lexical_rows(None, req, 10, get_settings()) == []
    assert run(corpus, query="?! …").hits == []
    # only stop words: the SQL runs, finds nothing, raises nothing
    assert run(corpus, query="и в на").hits == []


def test_set_local_does_not_leak_out_of_the_read_only_transaction(corpus, conn):
    from ragline.query.retrieval.search import search as sql_search

    before = conn.execute("SHOW hnsw.ef_search").fetchone()["hnsw.ef_search"]
    req = SearchRequest(query=WORD, tenant=corpus, groups=["g"], mode="hybrid", k=5)
    with pytest.raises(RuntimeError, match="idle connection"):
        sql_search(conn, req, vec(WORD), get_settings())  # a savepoint would let SET LOCAL leak
    conn.commit()
    assert sql_search(conn, req, vec(WORD), get_settings()).hits
    assert conn.execute("SHOW hnsw.ef_search").fetchone()["hnsw.ef_search"] == before
    conn.execute("CREATE TEMP TABLE writable_after (x int)")  # the read-only mode ended with its transaction
    conn.commit()
    from ragline.query.retrieval.transaction import read_only_transaction

    with read_only_transaction(conn):  # BEGIN READ ONLY did reach the server
        assert conn.execute("SHOW transaction_read_only").fetchone()["transaction_read_only"] == "on"
    assert conn.read_only is None
    assert conn.execute("SHOW transaction_read_only").fetchone()["transaction_read_only"] == "off"


def test_filters_apply_to_the_vector_retriever_too(corpus):
    resp = run(corpus, mode="vector", path_prefixes=["src/"], exclude_like_patterns=["*/tests/*"])
    assert set(ids(resp)) == {"main", "underscore"}
    assert all(h.vector_rank is not None and h.lexical_rank is None for h in resp.hits)
    assert set(ids(run(corpus, mode="hybrid", layers=["docs"], groups=["g", "hr"]))) == {
        "pct",
        "lookalike",
        "guide",
        "secret",
    }
