"""The query plan (query/plan.py), without services: built once from the request and the settings
(transforms, router, scope, candidates, rerank, expansion), immutable whatever happens to the request
or to what it hands out, and read by the answer side together with its evidence; the variants'
fusion the plan's execution applies."""

from __future__ import annotations

import dataclasses

import pytest

from ragline.query import plan as planning
from ragline.query import service
from ragline.query.answer.run import QuestionRun
from ragline.query.plan import Evidence, Route, llm_route, route
from ragline.query.question import compared
from ragline.query.retrieval.fusion import FusionPolicy
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import AskRequest, ChatTurn, Hit
from ragline.shared.worker import providers
from ragline.shared.worker.providers import Generation

COMPARISON = "Чем v-if отличается от v-show и когда что лучше использовать?"


class Chat:
    """A chat model's completion answering by prompt, counting its calls; an exception is raised."""

    name = "anthropic"

    def __init__(self, by_prompt: dict[str, str | Exception] | None = None, default: str = "") -> None:
        self.by_prompt = by_prompt or {}
        self.default = default
        self.calls: list[str] = []

    def generate(self, system: str, messages: list[dict], max_tokens: int | None = None) -> Generation:
        self.calls.append(system)
        out = self.by_prompt.get(system, self.default)
        if isinstance(out, Exception):
            raise out
        return Generation(out, 10, 5)


def request(**fields: object) -> AskRequest:
    base: dict = {"query": COMPARISON, "tenant": "t", "groups": ["b", "a"], "k": 3}
    return AskRequest(**{**base, **fields})


# ----------------------------------------------------------------------------------- immutable
def test_the_plan_is_frozen_hashable_and_independent_of_its_request():
    req = request(path_prefixes=["docs/"], layers=["docs"], query_vector=[0.5, 0.25])
    built = planning.build(req, Settings())
    again = planning.build(req, Settings())
    assert hash(built) == hash(again) and built == again  # every field an immutable value
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.queries = ("another",)  # type: ignore[misc]
    # the request changing after the plan was built changes nothing in it
    req.groups.append("z")
    req.path_prefixes.clear()
    req.query = "something else"
    assert (
        built == again and built.search(0).groups == ["a", "b"] and built.search(0).path_prefixes == ["docs/"]
    )
    # nor does what the plan hands out: each search is a new request
    handed = built.search(1)
    handed.groups.append("z")
    handed.layers.clear()
    assert built.search(1).groups == ["a", "b"] and built.search(1).layers == ["docs"] and built == again


def test_the_evidence_is_frozen():
    found = Evidence(hits=(Hit(doc_id="d", chunk_no=0, content="x"),), candidates=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.hits = ()  # type: ignore[misc]


# ---------------------------------------------------------------------------------- what it holds
def test_the_plan_holds_the_router_sub_queries_and_the_callers_scope():
    settings = Settings(rerank={"provider": "voyage", "candidates": 20}, answer={"expand": "section"})
    req = request(path_prefixes=["docs/"], query_vector=[0.5, 0.25])
    built = planning.build(req, settings)
    assert built.queries == (COMPARISON, "v-if", "v-show") and built.question == COMPARISON
    assert built.route == route(COMPARISON, compared(COMPARISON))
    assert (built.k, built.candidates, built.rerank) == (3, 20, True)
    assert built.expansion.mode == "section"
    assert built.fusion == FusionPolicy.from_settings(settings)
    for i, q in enumerate(built.queries):
        sub = built.search(i)
        assert (sub.query, sub.tenant, sub.groups, sub.path_prefixes, sub.k) == (
            q,
            "t",
            ["a", "b"],
            ["docs/"],
            3,
        )
        assert sub.query_vector == [0.5, 0.25]
    assert built.request().query == COMPARISON
    # no reranker: each search keeps k; the request's own choice wins over the setting
    assert planning.build(request(rerank=False), settings).candidates == 3
    assert planning.build(request(mode="exact"), settings).rerank is False
    assert built.trace() == {"router": built.route.trace(), "queries": list(built.queries)}
    simple = planning.build(request(query="Что такое SSRF?"), settings)
    assert simple.queries == ("Что такое SSRF?",) and simple.trace() == {"router": Route("simple").trace()}


def test_transforms_rewrite_add_variants_and_a_hyde_vector(monkeypatch):
    class Embedder:
        def embed_documents(self, texts):
            return [[float(len(t)), 1.0] for t in texts]

    monkeypatch.setattr(providers, "get_embedder", Embedder)
    chat = Chat(
        {
            planning.REWRITE_PROMPT: "ретраи после ошибки 429\nлишняя строка",
            planning.MULTI_QUERY_PROMPT.format(n=2): "1. повтор при 429\n- ретраи после ошибки 429\nочереди",
            planning.HYDE_PROMPT: "Клиент повторяет запрос.",
        }
    )
    settings = Settings(
        transform={"rewrite": True, "multi_query": 2, "hyde": True}, answer={"decompose": "off"}
    )
    req = request(query="а для 429?", history=[ChatTurn(role="user", content="Как ретраить?")])
    built = planning.build(req, settings, chat)
    assert built.question == "ретраи после ошибки 429"
    assert built.queries == ("ретраи после ошибки 429", "повтор при 429", "очереди")
    assert built.hyde_vector == (float(len("Клиент повторяет запрос.")), 1.0) and built.reasons == ()
    assert built.search(0).query_vector == list(built.hyde_vector) and built.search(1).query_vector is None
    assert built.trace()["hyde"] is True and built.route == Route("simple", why="decomposition off")
    # a failed transform keeps the question and is a reason; the others still run
    failing = Chat({planning.REWRITE_PROMPT: TimeoutError()}, default="")
    built = planning.build(req, settings, failing)
    assert built.queries == ("а для 429?",) and built.reasons == ("rewrite: TimeoutError",)
    # a chat model that could not be built: every stage that wanted it says so, the rules route
    built = planning.build(request(), Settings(transform={"multi_query": 2}), None, ValueError("no key"))
    assert built.reasons == ("transform: ValueError", "router: ValueError") and len(built.queries) == 3


def test_the_answer_side_reads_the_plan_and_its_evidence():
    built = planning.build(request(), Settings())
    evidence = Evidence(
        hits=(),
        candidates=0,
        reasons=("vectors pending: 3 rows",),
        timings={"retrieve.total": 2.0, "retrieve": 2.5},
        trace={"retrieved": [], "unembedded_rows": 3},
    )
    run = QuestionRun.start("asked", Settings())
    run.read(dataclasses.replace(built, reasons=("router: TimeoutError",)), evidence)
    assert run.question == built.question
    assert run.reasons == ["router: TimeoutError", "vectors pending: 3 rows"]
    assert list(run.timings) == ["transform", "retrieve.total", "retrieve"]
    assert list(run.trace) == ["router", "queries", "retrieved", "unembedded_rows"]


def test_variants_are_fused_by_rank_under_the_plans_policy():
    def hit(doc: str) -> Hit:
        return Hit(doc_id=doc, chunk_no=0, content=doc, score=1.0)

    lists = [[hit("a"), hit("b")], [hit("b"), hit("c")]]
    policy = FusionPolicy()
    fused = service.fuse_variants(lists, policy, 5)
    assert [h.doc_id for h in fused] == ["b", "a", "c"]
    by_rank = dict(policy.by_rank({"0": [("a", 0), ("b", 0)], "1": [("b", 0), ("c", 0)]}))
    assert fused[0].score == fused[0].fused_score == round(by_rank[("b", 0)], 8)
    assert lists[0][1].score == 1.0  # the lists' own hits are not rescored
    assert service.fuse_variants(lists[:1], FusionPolicy(), 5) is lists[0]
    assert len(service.fuse_variants(lists, FusionPolicy(), 2)) == 2


# ---------------------------------------------------------------------------------------- router
def test_the_router_decomposes_comparisons_and_independent_parts_only():
    q = COMPARISON
    assert route(q, compared(q)) == Route("decompose", ("v-if", "v-show"), "comparison")
    two = "Какие события (hooks) поддерживает requests и как подключить свой обработчик ответа к запросу?"
    assert route(two).route == "decompose" and len(route(two).queries) == 2
    for simple in (
        "Что такое SSRF?",
        "What does the max_retries parameter of HTTPAdapter do, and what is its default value?",
    ):
        assert route(simple, compared(simple)).route == "simple"
    assert route(q, compared(q)).trace()["searches"] == 3

    chat = Chat(default="1. условный рендеринг v-if\n2. директива v-show\n")
    decided = llm_route(chat, q, route(q, compared(q)))
    assert decided.queries == ("условный рендеринг v-if", "директива v-show") and len(chat.calls) == 1
    simple_chat = Chat(default="ignored")
    assert llm_route(simple_chat, "Что такое SSRF?", route("Что такое SSRF?")).route == "simple"
    assert not simple_chat.calls  # the rules decide whether the call is spent
    assert llm_route(Chat(), q, route(q, compared(q))).queries == ("v-if", "v-show")
