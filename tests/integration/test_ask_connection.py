"""An ask's searches run on one connection of the query pool, whatever its plan holds: the router's
sub-queries, multi-query variants and HyDE, the rerank, the expansion's reading of sections, the
agentic loop's rounds. Before the query plan each search checked out its own connection and the
expansion one more after them.

Real Postgres (the ``stack`` fixture), the query pool's own counter of connection requests; each
case also checks from the answer's trace that its path really ran (several searches, chunks added),
so a case that silently fell back to one plain search cannot pass.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ragline.query import service
from ragline.query.plan import HYDE_PROMPT, MULTI_QUERY_PROMPT
from ragline.shared.sdk.contracts import AskRequest, AskResponse
from ragline.shared.worker import db
from tests.integration import test_expand
from tests.integration.query_corpus import store_docs
from tests.loopback import LoopbackServer

CONDITIONAL = [
    "Директива v-if рендерит элемент только когда условие истинно и удаляет его иначе.",
    "Директива v-show всегда рендерит элемент и переключает CSS-свойство display.",
]
COMPARISON = "Чем v-if отличается от v-show?"


def store(conn, tenant: str) -> None:
    test_expand.store(conn, tenant)  # the forms guide, a heading per chunk: sections to expand
    store_docs(conn, tenant, [{"doc_id": "guide/conditional.md", "chunks": CONDITIONAL, "acl": ["g"]}])


def checkouts(ask: Callable[[], AskResponse]) -> tuple[int, AskResponse]:
    """Connections the query pool handed out while ``ask()`` ran, and its response."""
    pool = db.get_query_pool()
    pool.pop_stats()
    resp = ask()
    return int(pool.pop_stats().get("requests_num", 0)), resp


def script(body: dict) -> str:
    """The chat model of the multi-query case: two variants, a HyDE passage, an answer."""
    system = body["system"][0]["text"]
    if system == MULTI_QUERY_PROMPT.format(n=2):
        return "модификатор lazy событие change\nдиректива v-show display"
    if system == HYDE_PROMPT:
        return "Модификатор lazy обновляет значение после события change."
    return "Модификатор lazy синхронизирует поле по событию change [1]."


def one_search(t: str) -> AskRequest:
    return AskRequest(query="Что делает модификатор lazy?", tenant=t, groups=["g"])


def decomposed(t: str) -> AskRequest:
    return AskRequest(query=COMPARISON, tenant=t, groups=["g"])


def expanded(t: str) -> AskRequest:
    return AskRequest(query="Что делает модификатор lazy?", tenant=t, groups=["g"], k=1, expand="section")


def all_stages(t: str) -> AskRequest:
    """The router's sub-queries, the rerank and the expansion in one ask."""
    return AskRequest(query=COMPARISON, tenant=t, groups=["g"], k=1, expand="document", rerank=True)


def agentic(t: str) -> AskRequest:
    # a word no document holds: the coverage planner searches again for it
    return AskRequest(query="Что делает модификатор lazy с квазаром?", tenant=t, groups=["g"], agentic=True)


def searches(resp: AskResponse) -> int:
    if "agentic" in resp.trace:
        return resp.trace["agentic"]["searches"]
    return resp.trace["router"]["searches"]


CASES = {
    "one-search": (one_search, lambda r: searches(r) == 1),
    "router-sub-queries": (decomposed, lambda r: searches(r) == 3),
    "expansion": (expanded, lambda r: bool(r.trace["expanded"]["added"])),
    "router-rerank-expansion": (
        all_stages,
        lambda r: searches(r) == 3 and "reranked" in r.trace and bool(r.trace["expanded"]["added"]),
    ),
    "agentic-rounds": (agentic, lambda r: searches(r) >= 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_ask_checks_out_one_connection(conn, tenant, voyage, case):
    voyage(rerank_provider="voyage")
    store(conn, tenant)
    request, ran = CASES[case]
    n, resp = checkouts(lambda: service.ask(request(tenant)))
    assert ran(resp), resp.trace
    assert n == 1, f"{case}: {n} connections for one ask"


def test_multi_query_and_hyde_check_out_one_connection(conn, tenant, use_settings):
    store(conn, tenant)
    with LoopbackServer(answer_fn=script) as srv:
        use_settings(
            answer_provider="anthropic",
            providers_anthropic_api_key="k",
            providers_anthropic_base_url=srv.url,
            embed_provider="voyage",
            providers_voyage_api_key="k",
            providers_voyage_base_url=srv.url,
            transform_multi_query=2,
            transform_hyde=True,
        )
        n, resp = checkouts(lambda: service.ask(one_search(tenant)))
    assert len(resp.trace["queries"]) == 3 and resp.trace["hyde"] is True, resp.trace
    assert n == 1, f"{n} connections for one ask"
