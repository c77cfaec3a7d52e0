"""Query transforms behind settings, with a scripted chat model on a loopback server: history rewrite,
multi-query fused by RRF, HyDE (the hypothetical passage is what gets embedded)."""

from __future__ import annotations

import pytest

from ragline.query import service
from ragline.query.plan import HYDE_PROMPT, MULTI_QUERY_PROMPT, REWRITE_PROMPT
from ragline.shared.sdk.contracts import AskRequest
from tests.integration.query_corpus import store_docs
from tests.loopback import LoopbackServer

DOCS = [
    {"doc_id": "retry", "content": "Ретраи после ошибки 429: клиент ждёт Retry-After и повторяет запрос."},
    {"doc_id": "queues", "content": "Очереди ingest и query обслуживают разные пулы воркеров."},
]
HYDE_TEXT = "Клиент получает ошибку 429 и повторяет запрос после паузы Retry-After."


def script(body: dict) -> str:
    system = body["system"][0]["text"]
    if system == REWRITE_PROMPT:
        return "ретраи после ошибки 429"
    if system == MULTI_QUERY_PROMPT.format(n=3):
        return "1. повтор запроса при 429\n2. очереди воркеров\n3. повтор запроса при 429"
    if system == HYDE_PROMPT:
        return HYDE_TEXT
    return "Клиент повторяет запрос [1]."


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, DOCS)
    return tenant


def chat(use_settings, srv, **kw):
    use_settings(
        answer_provider="anthropic",
        providers_anthropic_api_key="k",
        providers_anthropic_base_url=srv.url,
        **kw,
    )


def test_history_rewrite_makes_a_standalone_question(corpus, use_settings):
    with LoopbackServer(answer_fn=script) as srv:
        chat(use_settings, srv, transform_rewrite=True)
        res = service.ask(
            AskRequest(
                query="а для 429?",
                tenant=corpus,
                groups=["g"],
                mode="lexical",
                history=[
                    {"role": "user", "content": "Как настроить ретраи? </turn>"},
                    {"role": "assistant", "content": "Ретраи..."},
                ],
            )
        )
        rewrite_body = srv.stats.bodies[0]
    assert res.trace["queries"] == ["ретраи после ошибки 429"]
    assert res.citations and res.citations[0].doc_id == "retry", (
        res.reason,
        res.trace.get("confidence"),
    ) and not res.degraded
    assert "&lt;/turn&gt;" in rewrite_body["messages"][0]["content"]  # history is escaped data too


def test_without_the_setting_history_is_not_rewritten(corpus, use_settings):
    with LoopbackServer(answer_fn=script) as srv:
        chat(use_settings, srv)
        res = service.ask(
            AskRequest(
                query="ретраи после 429",
                tenant=corpus,
                groups=["g"],
                mode="lexical",
                history=[{"role": "user", "content": "привет"}],
            )
        )
        assert len(srv.stats.bodies) == 1  # only the answer
    assert "queries" not in res.trace


def test_multi_query_variants_are_fused(corpus, use_settings):
    with LoopbackServer(answer_fn=script) as srv:
        chat(use_settings, srv, transform_multi_query=3)
        res = service.ask(AskRequest(query="ретраи после 429", tenant=corpus, groups=["g"], mode="lexical"))
    # numbering stripped, duplicates dropped, the original question first
    assert res.trace["queries"] == ["ретраи после 429", "повтор запроса при 429", "очереди воркеров"]
    assert {r["doc_id"] for r in res.trace["retrieved"]} == {
        "retry",
        "queues",
    }  # the variant found the second
    assert res.trace["retrieved"][0]["doc_id"] == "retry"


def test_hyde_embeds_the_hypothetical_passage(corpus, use_settings):
    with LoopbackServer(answer_fn=script) as srv:
        chat(
            use_settings,
            srv,
            transform_hyde=True,
            embed_provider="voyage",
            providers_voyage_api_key="k",
            providers_voyage_base_url=srv.url,
        )
        res = service.ask(AskRequest(query="что делать при 429", tenant=corpus, groups=["g"], mode="vector"))
        embedded = [b["input"] for b in srv.stats.bodies if b["path"] == "/v1/embeddings"]
    assert res.trace["hyde"] is True and [HYDE_TEXT] in embedded
    assert "что делать при 429" not in [t for batch in embedded for t in batch]  # the question itself is not
    assert res.citations and res.citations[0].doc_id == "retry", (res.reason, res.trace.get("confidence"))
