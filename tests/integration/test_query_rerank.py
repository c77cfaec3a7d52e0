"""Rerank against a real HTTP server speaking Voyage's /v1/rerank: threshold, honest empty result,
and the degraded fallback to the fused order on a slow server, a 500 and garbage indexes."""

from __future__ import annotations

import pytest

from ragline.query import service
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.sdk.names import TASK_QUERY_RERANK
from ragline.shared.worker import metrics as m
from tests.integration.query_corpus import store_docs, vec
from tests.loopback import Faults, LoopbackServer

DOCS = [
    {"doc_id": "a", "content": "ретраи запросов клиента"},
    {"doc_id": "b", "content": "ретраи запросов клиента после ошибки 429 с паузой Retry-After"},
    {"doc_id": "c", "content": "ретраи и лимиты"},
    {"doc_id": "d", "content": "ретраи"},
]
QUERY = "ретраи после ошибки 429"


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, DOCS)
    return tenant


def degraded_count(reason: str) -> float:
    return m.RERANK_DEGRADED.labels(reason=reason)._value.get()


def request(tenant: str, query: str = QUERY, k: int = 3, **kw) -> SearchRequest:
    # vector mode with a precomputed query vector: every document is a candidate
    return SearchRequest(
        query=query, tenant=tenant, groups=["g"], k=k, mode="vector", query_vector=vec(query).tolist(), **kw
    )


def search(tenant: str, query: str = QUERY, k: int = 3):
    return service.search(request(tenant, query, k))


def fused_order(tenant: str, query: str = QUERY) -> list[str]:
    return [h.doc_id for h in service.search(request(tenant, query, 10, rerank=False)).hits]


def voyage(use_settings, srv, **kw):
    use_settings(
        rerank_provider="voyage", providers_voyage_api_key="test-key", providers_voyage_base_url=srv.url, **kw
    )


def test_rerank_reorders_with_scores_and_threshold(corpus, use_settings, monkeypatch):
    with LoopbackServer() as srv:
        voyage(use_settings, srv, rerank_timeout_s=5)
        resp = search(corpus)
        assert not resp.degraded
        assert [h.doc_id for h in resp.hits][0] == "b"  # every query word is in b
        assert len(resp.hits) == 3 and all(h.rerank_score is not None for h in resp.hits)
        assert [h.score for h in resp.hits] == sorted((h.score for h in resp.hits), reverse=True)
        body = srv.stats.bodies[-1]
        assert body["path"] == "/v1/rerank" and body["top_k"] == 3 and body["model"] == "rerank-2.5"
        assert len(body["documents"]) == 4  # every fused candidate, up to rerank_candidates

        monkeypatch.setattr(service, "RERANK_THRESHOLD", 0.9)
        assert [h.doc_id for h in search(corpus).hits] == ["b"]


def test_nothing_above_threshold_is_an_honest_empty_result(corpus, use_settings, monkeypatch):
    with LoopbackServer() as srv:
        voyage(use_settings, srv, rerank_timeout_s=5)
        monkeypatch.setattr(service, "RERANK_THRESHOLD", 0.6)
        resp = search(corpus, query="ретраи погода")  # half the words match at best
        assert resp.hits == [] and not resp.degraded


@pytest.mark.parametrize(
    "faults,reason",
    [
        (Faults(latency_s=1.5), "timeout"),
        (Faults(every_nth_500=1), "error"),
    ],
)
def test_slow_or_failing_reranker_falls_back_to_fused_order(
    corpus, use_settings, monkeypatch, faults, reason
):
    expected = fused_order(corpus)[:3]
    with LoopbackServer(faults=faults) as srv:
        voyage(use_settings, srv, rerank_timeout_s=0.3)
        monkeypatch.setattr(service, "RERANK_THRESHOLD", 0.99)
        before = degraded_count(reason)
        resp = search(corpus)
        assert resp.degraded and any(r.startswith("rerank") for r in resp.degraded_reasons)
        # no scores, so no threshold: the fused order, k of them
        assert [h.doc_id for h in resp.hits] == expected
        assert degraded_count(reason) == before + 1


def test_the_sdk_timeout_firing_first_is_still_a_timeout(corpus, use_settings):
    """The SDK's request timeout is the rerank budget, so under load it can fire before ragline's own
    deadline: the degradation reason must not depend on which clock won."""
    from ragline.query.retrieval.rerank import rerank_hits
    from ragline.shared.config.settings import get_settings
    from ragline.shared.worker.providers.rerank import VoyageReranker

    hits = service.search(request(corpus, k=4, rerank=False)).hits
    with LoopbackServer(faults=Faults(latency_s=1.5)) as srv:
        voyage(use_settings, srv, rerank_timeout_s=0.2)
        reranker = VoyageReranker(get_settings())
        before = degraded_count("timeout")
        out = rerank_hits(reranker, QUERY, hits, 3, 0.99, timeout_s=30)  # only the SDK's clock can fire
    assert out.degraded and [h.doc_id for h in out.hits] == [h.doc_id for h in hits[:3]]
    assert degraded_count("timeout") == before + 1


def test_garbage_indexes_are_validated_not_trusted(corpus, use_settings):
    with LoopbackServer(faults=Faults(garbage_rerank=True)) as srv:
        voyage(use_settings, srv, rerank_timeout_s=5)
        resp = search(corpus)
    # out-of-range, negative, non-integer and duplicate indexes dropped; the one valid item is kept
    assert [h.doc_id for h in resp.hits] == ["b"]
    assert not resp.degraded


def test_missing_optional_cross_encoder_degrades_with_a_clear_reason(corpus, use_settings, tmp_path):
    try:
        import sentence_transformers  # noqa: F401

        pytest.skip("sentence-transformers is installed here")
    except ImportError:
        pass
    use_settings(rerank_provider="cross-encoder", rerank_model_dir=tmp_path)
    resp = search(corpus)
    assert resp.degraded and "sentence-transformers" in " ".join(resp.degraded_reasons)
    assert [h.doc_id for h in resp.hits] == fused_order(corpus)[:3]


def test_rerank_task_contract(celery_worker, corpus, use_settings):
    from ragline.shared.worker.celery_app import app

    hits = service.search(request(corpus, k=4, rerank=False)).hits
    with LoopbackServer() as srv:
        voyage(use_settings, srv, rerank_timeout_s=5)
        res = app.send_task(
            TASK_QUERY_RERANK,
            args=[{"query": QUERY, "tenant": corpus, "hits": [h.model_dump() for h in hits], "top_k": 2}],
        ).get(timeout=30)
        assert [h["doc_id"] for h in res["hits"]] == ["b", res["hits"][1]["doc_id"]] and len(res["hits"]) == 2
        assert res["degraded"] is False and "rerank" in res["timings_ms"]
        bad = app.send_task(TASK_QUERY_RERANK, args=[{"query": QUERY, "hits": [{"doc_id": 1}]}]).get(
            timeout=30
        )
        assert bad["ok"] is False and bad["error"] == "invalid payload"
    assert vec("x").shape == (384,)
