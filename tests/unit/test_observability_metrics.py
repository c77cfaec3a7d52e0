"""The metrics the dashboard and the alerts need beyond the original set: question errors by kind
(``rag_query_errors_total``) and rerank latency (``rag_rerank_latency_ms``). The stuck-job counter
needs the database: tests/integration/test_observability_stuck.py."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from ragline.query import service
from ragline.query.admission import RateLimited
from ragline.query.deadline import QuestionDeadlineExceeded, RetrievalTimeout
from ragline.query.tasks import run_question
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import Hit, SearchResponse


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("exc", [RateLimited, QuestionDeadlineExceeded, RetrievalTimeout])
def test_a_question_refused_by_a_limit_is_counted_by_its_error(exc):
    before = sample("rag_query_errors_total", error=exc.error)

    def question():
        raise exc("limit")

    result = run_question(None, question)
    assert result["ok"] is False and result["error"] == exc.error
    assert sample("rag_query_errors_total", error=exc.error) == before + 1


def test_an_internal_error_is_counted_and_still_raised_for_the_base_task():
    before = sample("rag_query_errors_total", error="internal error")
    ok_before = sum(
        sample("rag_query_errors_total", error=e)
        for e in ("rate limited", "deadline exceeded", "retrieval timeout", "internal error")
    )

    def broken():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_question(None, broken)
    assert sample("rag_query_errors_total", error="internal error") == before + 1
    run_question(None, lambda: SearchResponse(hits=[]))  # an answered question counts nothing
    after = sum(
        sample("rag_query_errors_total", error=e)
        for e in ("rate limited", "deadline exceeded", "retrieval timeout", "internal error")
    )
    assert after == ok_before + 1


class ScoresInOrder:
    """A reranker that answers like a provider: (index, score) pairs."""

    calls = 0

    def rerank(self, query, texts, top_k):
        ScoresInOrder.calls += 1
        return [(i, 1.0 - i / 100) for i in range(len(texts))]


class Broken:
    def rerank(self, query, texts, top_k):
        raise ConnectionError("provider down")


@pytest.mark.parametrize("reranker", [ScoresInOrder(), Broken()], ids=["answered", "fell back"])
def test_rerank_latency_is_observed_per_provider_including_fallbacks(monkeypatch, reranker):
    monkeypatch.setattr(service.providers, "get_reranker", lambda: reranker)
    provider = get_settings().rerank.provider
    hits = [Hit(doc_id=f"d{i}", chunk_no=0, content=f"text {i}", score=0.5) for i in range(3)]
    count = sample("rag_rerank_latency_ms_count", provider=provider)
    total = sample("rag_rerank_latency_ms_sum", provider=provider)
    out = service.rerank_stage("q", hits, top_k=2, threshold=0.0)
    assert len(out.hits) == 2 and out.degraded is isinstance(reranker, Broken)
    assert sample("rag_rerank_latency_ms_count", provider=provider) == count + 1
    assert sample("rag_rerank_latency_ms_sum", provider=provider) == pytest.approx(total + out.ms)
    service.rerank_stage("q", [], top_k=2, threshold=0.0)  # nothing to rerank: nothing sent, nothing observed
    assert sample("rag_rerank_latency_ms_count", provider=provider) == count + 1
