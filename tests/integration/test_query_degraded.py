"""Query embedder failures degrade to lexical search (the real voyage embedder against a loopback server
answering 500 or hanging), and the query-embedding cache is scoped by tenant and group set."""

from __future__ import annotations

import pytest

from ragline.query import service
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker import metrics as m
from tests.integration.query_corpus import store_docs
from tests.loopback import Faults, LoopbackServer

DOCS = [
    {"doc_id": "r.md", "content": "ретраи после ошибки 429", "acl": ["g", "h"]},
    {"doc_id": "o.md", "content": "очереди и воркеры", "acl": ["g", "h"]},
]


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, DOCS)
    return tenant


def voyage(use_settings, srv, **kw):
    use_settings(
        embed_provider="voyage",
        providers_voyage_api_key="test-key",
        providers_voyage_base_url=srv.url,
        embed_max_retries=1,
        embed_backoff_base_s=0.01,
        embed_backoff_max_s=0.05,
        **kw,
    )


def search(tenant: str, groups=("g",), query: str = "ретраи после 429"):
    return service.search(
        SearchRequest(query=query, tenant=tenant, groups=list(groups), k=5, mode="hybrid", rerank=False)
    )


def test_embedder_500_falls_back_to_lexical_with_degraded_flag(corpus, use_settings):
    with LoopbackServer(faults=Faults(every_nth_500=1)) as srv:
        voyage(use_settings, srv)
        before = m.QUERY_DEGRADED.labels(reason="embedder")._value.get()
        resp = search(corpus)
        assert srv.stats.answered_500 >= 1  # the real SDK really called the server
    assert resp.degraded and resp.degraded_reasons[0].startswith("embedder")
    assert [h.doc_id for h in resp.hits] == ["r.md"]
    assert resp.hits[0].lexical_rank == 1 and resp.hits[0].vector_rank is None
    assert "vector" not in resp.timings_ms
    assert m.QUERY_DEGRADED.labels(reason="embedder")._value.get() == before + 1


def test_hanging_embedder_is_cut_at_the_query_deadline(corpus, use_settings):
    with LoopbackServer(faults=Faults(hang_s=3)) as srv:
        voyage(use_settings, srv, deadlines_query_embed_timeout_s=0.3)
        resp = search(corpus)
    assert resp.degraded and "timeout" in resp.degraded_reasons[0]
    assert [h.doc_id for h in resp.hits] == ["r.md"]


def test_query_embedding_cache_is_keyed_by_tenant_and_group_set(corpus, use_settings):
    with LoopbackServer() as srv:
        voyage(use_settings, srv)
        first = search(corpus)
        assert not first.degraded and first.hits[0].vector_rank is not None
        assert srv.stats.texts_embedded == 1
        search(corpus)  # same tenant, same groups: from the cache
        assert srv.stats.texts_embedded == 1
        search(corpus, groups=("h",))  # another permission set never shares an entry
        search(corpus, groups=("g", "h"))
        search(corpus + "-2")
        assert srv.stats.texts_embedded == 4
