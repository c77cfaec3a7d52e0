"""Convex score fusion (query/retrieval/fusion.py, ranking.RankingPolicy.fused_keys), its sweep, and the context title."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from ragline.query.retrieval import fusion
from ragline.query.retrieval.fusion import convex, normalize
from ragline.shared.config.settings import Settings


def test_normalizations():
    assert normalize([3.0, 2.0, 1.0]) == [1.0, 0.5, 0.0]
    z = normalize([3.0, 2.0, 1.0], "zscore")
    assert z[1] == 0.0 and math.isclose(z[0], -z[2]) and math.isclose(z[0], 1 / math.sqrt(2 / 3))
    # dbsf: mean ± 3 sd, so the best of a tight list is not pushed to 1
    d = normalize([3.0, 2.0, 1.0], "dbsf")
    assert 0.5 < d[0] < 1.0 and d[1] == 0.5 and 0.0 < d[2] < 0.5
    assert normalize([5.0, 5.0]) == [1.0, 1.0] and normalize([]) == []
    with pytest.raises(ValueError):
        normalize([1.0], "nope")  # type: ignore[arg-type]


def test_convex_keeps_score_gaps_that_rrf_loses():
    # the vector list barely prefers a; the lexical list is far surer of b: scores decide, ranks would not
    vec = [("a", 0.90), ("b", 0.89), ("c", 0.10)]
    lex = [("b", 20.0), ("a", 1.0), ("c", 0.5)]
    fused = convex({"vector": vec, "lexical": lex}, {"vector": 0.7, "lexical": 0.3})
    assert [d for d, _ in fused] == ["b", "a", "c"]
    scores = dict(fused)
    assert math.isclose(scores["b"], 0.7 * (0.79 / 0.80) + 0.3 * 1.0)
    assert math.isclose(scores["a"], 0.7 * 1.0 + 0.3 * (0.5 / 19.5))


def test_convex_gives_a_missing_hit_the_lists_floor_and_keeps_first_seen_order_on_ties():
    fused = dict(convex({"vector": [("a", 1.0), ("b", 0.0)], "lexical": [("c", 2.0)]}, {}))
    # c is missing from the vector list, a and b from the lexical one: 0 there
    assert fused == {"a": 1.0, "b": 0.0, "c": 1.0}
    z = dict(convex({"v": [("a", 3.0), ("b", 2.0), ("c", 1.0)], "l": [("a", 1.0), ("b", 0.0)]}, {}, "zscore"))
    assert math.isclose(z["c"], -1 / math.sqrt(2 / 3) - 1.0)  # under zscore: the list's lowest score
    order = [d for d, _ in convex({"x": [("p", 1.0), ("q", 1.0)]}, {})]
    assert order == ["p", "q"]


def _row(doc: str, **kw) -> dict:
    return {
        "doc_id": doc,
        "chunk_no": 0,
        "path": doc,
        "layer": "docs",
        "heading_path": "",
        "content": "Текст на русском языке о погоде и о городе.",
        "context": "",
        "page": None,
        "metadata": {},
        "distance": 0.2,
        "rank": 1.0,
        **kw,
    }


def fuse(vector, lexical, settings, limit, query="", vector_share=1.0, paths=None):
    """A search's fused hits for ``query`` (:meth:`RankingPolicy.fuse`), with the path preferences
    ``paths`` (:class:`~ragline.query.retrieval.ranking.PathPreferences`)."""
    from ragline.query.retrieval.ranking import PathPreferences, RankingPolicy

    policy = replace(RankingPolicy.for_question(query, settings), paths=paths or PathPreferences())
    return policy.fuse(vector, lexical, limit, vector_share)


def fusion_policy(query, settings, rows=()):
    """The fusion a search for ``query`` over ``rows`` runs (:meth:`RankingPolicy.fusion`)."""
    from ragline.query.retrieval.ranking import RankingPolicy

    return RankingPolicy.for_question(query, settings).fusion(rows)


def test_fuse_convex_in_rrf_units_then_bonus_and_penalty(monkeypatch):

    monkeypatch.setattr(fusion, "PROSE", replace(fusion.PROSE, convex_lexical=0.6, normalization="minmax"))
    s = Settings(fusion_method="convex")
    from ragline.query.retrieval.ranking import PathPreferences

    vector = [_row("a", distance=0.10), _row("b", distance=0.12), _row("t", distance=0.11, layer="T")]
    lexical = [_row("b", rank=9.0), _row("c", rank=1.0)]
    paths = PathPreferences(globs=("c*",), tests_layer="T", bonus=0.5, penalty=1.0)
    hits = fuse(vector, lexical, s, limit=4, query="погода в городе", paths=paths)
    assert [h.doc_id for h in hits] == ["c", "b", "a", "t"]
    by = {h.doc_id: h for h in hits}
    assert by["b"].fused_score == round((0.4 * 0.0 + 0.6 * 1.0) / 61, 8)
    assert by["a"].fused_score == round(0.4 * 1.0 / 61, 8)  # missing from the lexical list: 0 there
    assert by["c"].score == round(0.5 + by["c"].fused_score, 8)
    assert by["t"].score < 0


def test_questions_naming_code_use_the_code_fusion():

    def fusion_for(query, settings, rows=()):
        return fusion_policy(query, settings, rows).method

    s = Settings(fusion_method="convex", fusion_method_code="rrf")
    assert fusion_for("какая погода в Москве", s) == "convex"
    assert fusion_for("where is register_hook defined?", s) == "rrf"
    assert fusion_for("error in requests/sessions.py", s) == "rrf"
    assert fusion_for("register_hook", Settings(fusion_method="rrf", fusion_method_code="rrf")) == "rrf"
    # a prose question whose candidates are code, or point at code, is code retrieval too
    assert (
        fusion_for("как зарегистрировать хук", s, [_row("a"), _row("b", layer="C0_SOURCE_CHUNKS")]) == "rrf"
    )
    pointing = _row("d", metadata={"related_code": ["pkg/registry.py"]})
    assert fusion_for("как зарегистрировать хук", s, [_row("a"), pointing]) == "rrf"
    assert fusion_for("как зарегистрировать хук", s, [_row("a")]) == "convex"


def test_code_retrieval_fuses_with_the_code_lexical_weight(monkeypatch):
    """A question naming an identifier, or code candidates, give the lexical list the code policy's
    weight; prose keeps the prose policy's."""

    monkeypatch.setattr(fusion, "CODE", replace(fusion.CODE, lexical_weight=1.0))
    assert fusion.PROSE.lexical_weight == 0.0175

    def fusion_plan(query, settings, rows=()):
        policy = fusion_policy(query, settings, rows)
        return policy.method, policy.lexical_weight

    s = Settings(fusion_method="convex", fusion_method_code="rrf")
    vector = [_row("a", distance=0.10), _row("b", distance=0.11), _row("c", distance=0.12)]
    lexical = [_row("c", rank=3.0)]
    # c: 1/63 + w/61 beats a's 1/61 only at the code weight (at 0.0175 a stays first)
    assert [h.doc_id for h in fuse(vector, lexical, s, 3, "where is register_hook defined?")][0] == "c"
    rrf_only = Settings(fusion_method="rrf", fusion_method_code="rrf")
    assert [h.doc_id for h in fuse(vector, lexical, rrf_only, 3, "как зарегистрировать хук")][0] == "a"
    code_rows = [_row("a", layer="C0_SOURCE_CHUNKS")]
    assert [h.doc_id for h in fuse(code_rows + vector[1:], lexical, rrf_only, 3, "как зарегистрировать хук")][
        0
    ] == "c"
    assert fusion_plan("как зарегистрировать хук", s) == ("convex", 0.0175)
    assert fusion_plan("как зарегистрировать хук", s, code_rows) == ("rrf", 1.0)
    assert fusion_plan("HTTPAdapter.send падает", s) == ("rrf", 1.0)


def test_cross_script_question_keeps_the_vector_order_under_convex_too(monkeypatch):

    monkeypatch.setattr(fusion, "PROSE", replace(fusion.PROSE, convex_lexical=0.6, normalization="minmax"))

    ru = "Лютер писал, что двое монахов были сожжены на костре в Брюсселе, и это было началом."
    vector = [_row("Martin_Luther_p3", content=ru, distance=0.15), _row("UMC_p4", content=ru, distance=0.151)]
    lexical = [_row("UMC_p4", content=ru, rank=5.0)]
    s = Settings(fusion_method="convex")
    english = "Why were Johann Esch and Heinrich Voes executed by the Catholic Church?"
    assert [h.doc_id for h in fuse(vector, lexical, s, 2, english)] == ["Martin_Luther_p3", "UMC_p4"]
    russian = "Почему монахи были сожжены в Брюсселе?"
    assert [h.doc_id for h in fuse(vector, lexical, s, 2, russian)] == ["UMC_p4", "Martin_Luther_p3"]


def test_sweep_fusion_recomputes_hybrid_from_the_scored_lists():
    from ragline.operations.eval import candidate_lists, sweep_fusion, sweep_rrf

    lists = {
        "vector": [
            {"doc_id": "a", "chunk_no": 0, "content": "текст", "vector_distance": 0.10},
            {"doc_id": "c", "chunk_no": 0, "content": "текст", "vector_distance": 0.105},
            {"doc_id": "b", "chunk_no": 0, "content": "текст", "vector_distance": 0.11},
        ],
        "lexical": [{"doc_id": "b", "chunk_no": 0, "content": "текст", "lexical_score": 12.0}],
    }
    calls = []

    def search(query: str, mode: str, k: int) -> dict:
        calls.append(mode)
        return {"hits": lists[mode]}

    queries = [{"query": "где b", "relevant": {"b": 1}}]
    runs = candidate_lists(queries, search, 50)
    rows = sweep_fusion(
        queries,
        search,
        [
            {"method": "rrf"},
            {"method": "convex", "convex_lexical": 0.6, "normalization": "minmax"},
        ],
        Settings(),
        runs=runs,
    )
    # rrf keeps b behind a (1/63 + 0.0175/61 < 1/61), convex trusts its lexical score
    assert [r["mrr@10"] for r in rows] == [0.5, 1.0]
    assert rows[1]["method"] == "convex" and rows[1]["n"] == 1
    assert sweep_rrf(queries, search, [(1.0, 0.0175)], runs=runs)[0]["mrr@10"] == 0.5
    assert calls == ["vector", "lexical"]  # one run of each list served every sweep


def test_context_title_drops_the_doc_id_placeholder_only():
    from ragline.ingest.contextualize import context_title

    assert context_title("tydi-ru-p0206", "tydi-ru-p0206") == ""
    assert context_title("Руководство по установке", "tydi-ru-p0206") == "Руководство по установке"
    assert context_title("install-guide", None) == "install-guide"  # a file's name is kept


def test_best_single_list_takes_the_better_list_per_question():
    from ragline.operations.eval import best_single_list

    def hits(*docs):
        return [{"doc_id": d, "chunk_no": 0} for d in docs]

    queries = [{"query": "q1", "relevant": ["a"]}, {"query": "q2", "relevant": ["z"]}]
    runs = [
        (queries[0], {"vector": hits("b", "a"), "lexical": hits("a", "b")}),  # lexical has it first
        (queries[1], {"vector": hits("b"), "lexical": hits("c")}),  # neither list has it
    ]
    out = best_single_list(runs)
    assert out == {"ndcg@10": 0.5, "fail@20": 0.5, "n": 2}
