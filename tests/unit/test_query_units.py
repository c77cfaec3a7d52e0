"""Pure parts of the query pool: citations, rerank validation, filters, lexical query, eval metrics."""

from __future__ import annotations

import math

import pytest

from ragline.operations.eval import doc_ranking, grades, ndcg_at_k, recall_at_k, reciprocal_rank
from ragline.query.answer.citations import cited_numbers, invalid_citations
from ragline.query.retrieval.filters import (
    clean_paths,
    glob_pattern,
    lexical_query,
    like_escape,
    prefix_pattern,
)
from ragline.query.retrieval.rerank import validate_ranked


def test_citations():
    assert cited_numbers("a [2] b [1] c [2]") == [2, 1]
    assert invalid_citations("ответ [1] и [7]", 5) == [7]
    assert invalid_citations("[0]", 5) == [0]
    assert invalid_citations("[1][5]", 5) == []


def test_validate_ranked_treats_provider_output_as_untrusted():
    raw = [
        (9, 0.99),
        (-1, 0.98),
        ("x", 0.97),
        (True, 0.9),
        (1, float("nan")),
        (1, "0.5"),
        (0, 0.2),
        (2, 0.7),
        (2, 0.6),
        (1, 0.5),
    ]
    good, dropped = validate_ranked(raw, 3)
    assert good == [(2, 0.7), (1, 0.5), (0, 0.2)]
    assert dropped == len(raw) - 3


def test_like_escaping_and_globs():
    assert like_escape(r"a%b_c\d") == r"a\%b\_c\\d"
    assert prefix_pattern("docs/100%_done/") == r"docs/100\%\_done/%"
    assert glob_pattern("*/tests/*") == "%/tests/%"
    assert glob_pattern("file?_%.py") == r"file_\_\%.py"
    assert clean_paths(["", "  ", "./a/b.md", "a/b.md", "c\\d.md"]) == ["a/b.md", "c/d.md"]


def test_lexical_query_any_or_all():
    assert lexical_query("Кто такой Робеспье́р?") == "Кто or такой or Робеспье́р or Робеспьер"
    assert lexical_query("?!") == ""
    assert lexical_query('"точная фраза" -минус', match="all") == '"точная фраза" -минус'
    assert "or or" not in lexical_query("this or that")


def test_metrics_follow_the_reference_formulas():
    rel = {"a": 2, "b": 1}
    assert recall_at_k(["x", "a", "y"], rel, 2) == 0.5
    assert reciprocal_rank(["x", "a"], rel, 10) == 0.5
    assert reciprocal_rank(["x", "a"], rel, 1) == 0.0  # MRR@k: beyond k does not count
    assert ndcg_at_k(["a", "b"], rel, 2) == 1.0
    assert 0 < ndcg_at_k(["b", "a"], rel, 2) < 1
    # the reference evaluation script's worked example: recall@5=0.667 MRR=0.500 nDCG@5=0.512
    golden = [
        (
            {"limits#2": 2, "go-sdk#5": 2, "errors#1": 1},
            ["go-sdk#5", "changelog#9", "limits#2", "python-sdk#3", "errors#1"],
        ),
        ({"limits#1": 1}, ["limits#3", "limits#1", "batch#2"]),
        ({"billing#4": 2}, ["billing#1", "faq#7", "billing#2"]),
    ]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean([recall_at_k(f, r, 5) for r, f in golden]) == pytest.approx(0.667, abs=1e-3)
    assert mean([reciprocal_rank(f, r, 5) for r, f in golden]) == pytest.approx(0.5)
    assert mean([ndcg_at_k(f, r, 5) for r, f in golden]) == pytest.approx(0.512, abs=1e-3)
    assert math.isclose(ndcg_at_k([], rel, 5), 0.0)


def test_grades():
    assert grades(["a", "b"]) == {"a": 1, "b": 1}
    assert grades({"a": 2, "b": 0}) == {"a": 2}  # grade 0: judged, not relevant


def test_doc_ranking_first_occurrence_counts():
    assert doc_ranking(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]
