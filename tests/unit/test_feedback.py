"""Pseudo-relevance feedback's pure parts (query/retrieval/feedback.py): Rocchio and expansion terms."""

from __future__ import annotations

import numpy as np
import pytest

from ragline.query.retrieval import feedback
from ragline.shared.config.settings import Settings


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_rocchio_is_alpha_q_plus_beta_mean_at_unit_length():
    q = unit(1, 0, 0)
    docs = [unit(1, 1, 0), unit(1, 0, 1)]
    moved = feedback.rocchio(q, docs, alpha=1.0, beta=0.5)
    expected = q + 0.5 * (docs[0] + docs[1]) / 2
    assert moved == pytest.approx(expected / np.linalg.norm(expected), abs=1e-6)
    assert np.linalg.norm(moved) == pytest.approx(1.0, abs=1e-6)
    assert moved.dtype == np.float32


def test_rocchio_moves_toward_the_feedback_and_beta_sets_how_far():
    q, near = unit(1, 0, 0), unit(0.5, 1, 0)  # a passage worded like the good hits, not like the question
    docs = [unit(1, 0.6, 0), unit(1, 0.6, 0.1)]
    before = cos(q, near)
    small = cos(feedback.rocchio(q, docs, 1.0, 0.25), near)
    large = cos(feedback.rocchio(q, docs, 1.0, 1.0), near)
    assert before < small < large


def test_rocchio_without_feedback_keeps_the_question():
    q = np.asarray([3.0, 4.0], dtype=np.float32)
    assert feedback.rocchio(q, [], 1.0, 0.5) == pytest.approx([0.6, 0.8])
    assert feedback.rocchio(q, [unit(0, 1)], 1.0, 0.0) == pytest.approx([0.6, 0.8])
    # nothing to steer by (alpha 0, no feedback): the question as given, never NaN
    assert feedback.rocchio(q, [], 0.0, 1.0) == pytest.approx([3.0, 4.0])


def test_expansion_terms_are_shared_by_the_feedback_and_new_to_the_question():
    hits = [
        {"кошк": 3, "мурлыка": 2, "диван": 1, "ус": 4, "1951": 2},
        {"кошк": 1, "мурлыка": 1, "окн": 1, "ус": 1, "1951": 1},
        {"мурлыка": 1, "окн": 2, "сосед": 5},
    ]
    # the question's own lexeme is not added again; a word of one hit only ("диван", "сосед") is that
    # hit's topic; short lexemes and bare numbers say nothing: dropped
    assert feedback.expansion_terms(["кошк"], hits, 5) == ["мурлыка", "окн"]
    assert feedback.expansion_terms(["кошк"], hits, 1) == ["мурлыка"]
    assert feedback.expansion_terms(["кошк"], hits, 0) == []
    # ranked by hits holding the term, then occurrences, then first appearance
    assert feedback.expansion_terms([], hits, 3, min_docs=1) == ["мурлыка", "кошк", "окн"]


def test_expansion_terms_with_one_feedback_hit_take_its_most_frequent_words():
    assert feedback.expansion_terms(["кошк"], [{"кошк": 5, "сосед": 2, "окн": 3}], 1) == ["окн"]
    assert feedback.expansion_terms(["кошк"], [], 3) == []


def test_feedback_keys_are_the_first_m_fused():
    fused = [(("a", 0), 0.9), (("b", 1), 0.5), (("c", 0), 0.1)]
    assert feedback.feedback_keys(fused, 2) == [("a", 0), ("b", 1)]
    assert feedback.feedback_keys(fused, 10) == [("a", 0), ("b", 1), ("c", 0)]


def test_tsquery_literal_quotes_lexemes():
    assert feedback.tsquery_literal(["мурлыка", "o'neil", "a\\b"]) == "'мурлыка' | 'o''neil' | 'a\\\\b'"
    assert feedback.tsquery_literal([]) == ""


def test_settings_default_off_and_validated(monkeypatch):
    assert Settings().prf.mode == "off"
    monkeypatch.setenv("RAGLINE_PRF_MODE", "both")
    monkeypatch.setenv("RAGLINE_PRF_DOCS", "5")
    monkeypatch.setenv("RAGLINE_PRF_BETA", "0.25")
    s = Settings().prf
    assert (s.mode, s.docs, s.beta) == ("both", 5, 0.25)
    monkeypatch.setenv("RAGLINE_PRF_MODE", "rocchio")
    with pytest.raises(ValueError):
        Settings()
