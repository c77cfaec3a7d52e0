"""The retrieval contract's lexical code fallback through the real retrieve task: the source layer
only, and no embedding of the question."""

from __future__ import annotations

from tests.integration.test_code_structure import loopback, repo_tenant  # noqa: F401  (fixtures)


def retrieve(tenant: str, query: str, mode: str, **kw) -> dict:
    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker.celery_app import app

    payload = {"query": query, "tenant": tenant, "groups": ["dev"], "k": 50, "mode": mode, **kw}
    res = app.send_task(TASK_QUERY_RETRIEVE, args=[payload]).get(timeout=60)
    assert res.get("ok") is not False, res
    return res


def test_the_fallback_searches_the_source_layer_only(repo_tenant, loopback):  # noqa: F811
    # the plain lexical mode finds register_hook in every layer that holds it
    layers = {h["layer"] for h in retrieve(repo_tenant, "register_hook", "lexical")["hits"]}
    assert {"C0_SOURCE_CHUNKS", "C1_SYMBOLS", "C0_TEST_CHUNKS"} <= layers
    before = loopback.stats.requests
    for kw in ({}, {"layers": ["C1_SYMBOLS", "C0_TEST_CHUNKS"]}):
        res = retrieve(repo_tenant, "register_hook", "lexical_code", **kw)
        hits = res["hits"]
        assert {h["layer"] for h in hits} == {"C0_SOURCE_CHUNKS"}, kw
        assert {h["path"] for h in hits} == {"r/pkg/hooks.py", "r/pkg/client.py"}
        assert all(h["lexical_rank"] is not None and h["vector_rank"] is None for h in hits)
        defining = next(h for h in hits if h["path"] == "r/pkg/hooks.py")
        assert (defining["metadata"]["span_start"], defining["metadata"]["span_end"]) == (7, 9)
    assert retrieve(repo_tenant, "?!", "lexical_code")["hits"] == []
    assert loopback.stats.requests == before  # the question was never embedded
