"""An answer over a scope whose rows partly await their vectors: the response says so, and the one
fitted model (``grounding.SCOPE_FEATURES``) reads the scope's awaiting share, which reaches the
answer side through the frozen evidence (``Evidence.vector_share``, taken in by
``QuestionRun.read``). Measured (docs/evaluation.md, "Scopes awaiting their vectors"): an answer
quoting another language than the question's is right less often the more of its scope awaits
vectors (only the vector search finds across languages), at the same composer features; one in the
question's language is not. No services: the embedder is unavailable, the extractive generator
answers."""

from __future__ import annotations

import pytest

from ragline.query import plan as planning
from ragline.query.answer import grounding
from ragline.query.answer.run import QuestionRun, respond
from ragline.query.plan import Evidence
from ragline.query.service import awaiting_reason
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import AskRequest, AskResponse, Hit
from ragline.shared.worker import providers

DOC = "Клиент повторяет запрос после ошибки 429 с паузой из заголовка Retry-After."
SAME = "Сколько ждёт клиент после ошибки 429?"
OTHER = "How long does the client wait after error 429?"


@pytest.fixture(autouse=True)
def no_embedder(monkeypatch):
    def unavailable():
        raise RuntimeError("no embedder in unit tests")

    monkeypatch.setattr(providers, "get_embedder", unavailable)


def answer(question: str, vector_share: float, unembedded: int) -> tuple[AskResponse, dict]:
    """The extractive answer to ``question`` over the same hits, from a scope of which
    ``vector_share`` of the embeddable rows have their vectors; and its confidence's features."""
    settings = Settings(answer={"grounding": "off", "min_confidence": 0.0})
    hits = tuple(
        Hit(doc_id=f"d{i}", chunk_no=0, path=f"d{i}.md", content=DOC, score=1.0 - i / 10) for i in range(2)
    )
    reasons = (awaiting_reason(unembedded),) if unembedded else ()
    evidence = Evidence(hits, 2, unembedded, vector_share, reasons)
    run = QuestionRun.start(question, settings)
    run.read(planning.build(AskRequest(query=question, tenant="t", groups=["g"]), settings), evidence)
    return respond(run, list(hits)), dict(run.trace["confidence"]["features"])


@pytest.mark.parametrize("question", [SAME, OTHER], ids=["question's language", "another language"])
def test_an_answer_over_a_scope_awaiting_vectors_says_so_and_its_confidence_reads_the_share(question):
    full, full_features = answer(question, 1.0, 0)
    partial, partial_features = answer(question, 0.5, 40)
    assert not full.no_answer and not partial.no_answer and partial.answer == full.answer
    assert not full.degraded and partial.degraded
    assert partial.degraded_reasons == [awaiting_reason(40)]
    # the trace holds the features rounded to 3 places
    assert partial.confidence == pytest.approx(grounding.answer_probability(partial_features), abs=2e-3)
    # the same composer features; the scope's share awaiting vectors beside them
    assert full_features.pop("awaiting") == 0.0 and partial_features.pop("awaiting") == 0.5
    assert full_features == partial_features
    if question == OTHER:
        assert partial_features["cross"] == 1.0 and partial.confidence < full.confidence
    else:
        assert partial_features["cross"] == 0.0 and partial.confidence == full.confidence


def test_the_fitted_model_trusts_a_quote_in_another_language_less_the_more_of_its_scope_awaits():
    """For composer features at the fit's means, a weak and a strong answer: the probability of an
    answer quoting another language falls as the awaiting share grows; the same answer in the
    question's language keeps its probability."""
    model = grounding.confidence_model()
    assert set(grounding.SCOPE_FEATURES) <= set(model["features"])
    means = dict(zip(model["features"], model["mean"], strict=True))
    scale = dict(zip(model["features"], model["scale"], strict=True))
    weak = {**means, "hit_z": means["hit_z"] - scale["hit_z"], "lexical": 0.0}
    strong = {**means, "hit_z": means["hit_z"] + scale["hit_z"], "lexical": 1.0}
    for features in (means, weak, strong):
        other = [grounding.answer_probability({**features, "cross": 1.0, "awaiting": s}) for s in (0, 0.5, 1)]
        assert other[0] > other[1] > other[2], other
        same = {grounding.answer_probability({**features, "cross": 0.0, "awaiting": s}) for s in (0, 0.5, 1)}
        assert len(same) == 1, same
    assert grounding.scope_features(1.0) == {"awaiting": 0.0}
    assert grounding.scope_features(0.25) == {"awaiting": 0.75}
    assert grounding.feature_value({"awaiting": 0.5, "cross": 1.0}, "awaiting*cross") == 0.5
    assert grounding.feature_value({"awaiting": 0.5, "cross": None}, "awaiting*cross") is None
    assert grounding.feature_value({}, "awaiting*cross") == 0.0


def test_the_evaluation_page_holds_the_calibration_tables_of_the_shipped_model():
    """docs/evaluation.md's reliability and awaiting-share tables are those of the fit that wrote
    confidence.json (``python -m bench.answer_calibration ... --write`` writes all three)."""
    import json

    from bench.answer_calibration import DOCS_MARKERS, RESULTS, tables
    from bench.report import EVAL_PAGE

    result = json.loads((RESULTS / "answer-calibration.json").read_text(encoding="utf-8"))
    assert result["model"] == grounding.confidence_model()
    assert {s["awaiting"] for s in result["by_awaiting"]} == {0.0, 0.25, 0.5, 0.75}
    text = EVAL_PAGE.read_text(encoding="utf-8")
    start, end = DOCS_MARKERS
    assert text.count(start) == 1 and text.count(end) == 1
    assert text[text.index(start) + len(start) : text.index(end)].strip() == tables(result).strip()
