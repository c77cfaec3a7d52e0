"""The answer stages of ``ask`` on the real stack, with a loopback Anthropic server as the chat model:
context assembly (merge, budget, order, squeeze), the groundedness check (generator judge), self-
consistency and the confidence guardrail; each visible in the response, its trace and the metrics."""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace

import pytest

from ragline.query import service
from ragline.query.answer import run
from ragline.query.answer.prompt import JUDGE_PROMPT, SQUEEZE_PROMPT
from ragline.shared.sdk.contracts import AskRequest
from ragline.shared.worker import metrics as m
from tests.integration.query_corpus import store_docs
from tests.loopback import LoopbackServer

C0 = "Вычисляемые свойства описывают сложную логику. Кэш хранит результат вычисления."
C1 = "Кэш хранит результат вычисления. Вычисляемое свойство пересчитывается при изменении зависимостей."
C2 = "Вычисляемое свойство пересчитывается при изменении зависимостей. Метод вызывается при каждой перерисовке."
DOCS = [
    {"doc_id": "guide", "path": "guide.md", "heading": "Кэш", "chunks": [C0, C1, C2]},
    *(
        {"doc_id": f"other{i}", "path": f"other{i}.md", "content": f"Кэш браузера номер {i} хранит файлы."}
        for i in range(1, 5)
    ),
]
QUESTION = "кэш вычисляемое свойство зависимостей перерисовке"
_DOC = re.compile(r'<document index="(\d+)" doc_id="([^"]*)"')


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, DOCS)
    return tenant


def ask(tenant: str, **kw):
    return service.ask(AskRequest(query=QUESTION, tenant=tenant, groups=["g"], k=7, mode="lexical", **kw))


def user_text(body: dict) -> str:
    return body["messages"][-1]["content"]


def passage_of(body: dict, doc_id: str) -> int:
    return next(int(n) for n, d in _DOC.findall(user_text(body)) if d == doc_id)


def system_of(body: dict) -> str:
    s = body.get("system")
    return s[0]["text"] if isinstance(s, list) else str(s)


def model(answer, judge=None, squeezed=None):
    """A scripted chat model: ``answer(body)`` for answer calls, ``judge(body)`` for judge calls."""

    def fn(body: dict) -> str:
        system = system_of(body)
        if system == SQUEEZE_PROMPT:
            return squeezed or ""
        if system == JUDGE_PROMPT:
            return judge(body) if judge else "{}"
        return answer(body)

    return fn


def use_chat(use_settings, srv, **kw):
    use_settings(
        answer_provider="anthropic",
        providers_anthropic_api_key="k",
        providers_anthropic_base_url=srv.url,
        **kw,
    )


def answer_bodies(srv) -> list[dict]:
    return [b for b in srv.stats.bodies if system_of(b) not in (SQUEEZE_PROMPT, JUDGE_PROMPT)]


def test_overlapping_chunks_are_one_passage_and_citations_name_the_right_chunk(corpus, use_settings):
    said = "Метод вызывается при каждой перерисовке"
    with LoopbackServer(answer_fn=model(lambda b: f"{said} [{passage_of(b, 'guide')}].")) as srv:
        use_chat(use_settings, srv)
        res = ask(corpus)
        prompt = user_text(answer_bodies(srv)[-1])
    assert not res.no_answer, res.reason
    # one <document> for the three chunks of "guide", each overlapping sentence written once
    assert prompt.count('doc_id="guide"') == 1
    assert prompt.count("Кэш хранит результат вычисления.") == 1
    assert prompt.count("Вычисляемое свойство пересчитывается при изменении зависимостей.") == 1
    passages = res.trace["context"]["passages"]
    guide = next(p for p in passages if p["doc_id"] == "guide")
    assert guide["chunks"] == [0, 1, 2] and res.trace["context"]["merged_chunks"] == 2
    # the citation names the chunk that holds the sentence, not the passage's first chunk
    (cite,) = res.citations
    assert (cite.doc_id, cite.chunk_no, cite.n) == ("guide", 2, guide["n"])
    assert said in cite.snippet
    # the strongest passages at both ends of the prompt, numbers unchanged
    order = [int(n) for n, _ in _DOC.findall(prompt)]
    assert order == res.trace["context"]["order"] and order[0] == 1 and order[-1] == 2
    assert "context" in res.timings_ms


def test_token_budget_leaves_the_weakest_passages_out(corpus, use_settings):
    with LoopbackServer(answer_fn=model(lambda b: "Кэш хранит результат вычисления [1].")) as srv:
        use_chat(use_settings, srv, answer_context_budget_tokens=json.dumps({"anthropic": 200}))
        res = ask(corpus)
        prompt = user_text(answer_bodies(srv)[-1])
    ctx = res.trace["context"]
    assert ctx["dropped"] and ctx["tokens"] <= 200
    assert prompt.count("<document ") == len(ctx["passages"]) < 5
    assert not res.no_answer


def test_squeeze_shortens_long_passages_before_the_answer_call(corpus, use_settings, monkeypatch):
    short = "Метод вызывается при каждой перерисовке."
    fn = model(lambda b: f"{short[:-1]} [{passage_of(b, 'guide')}].", squeezed=short)
    with LoopbackServer(answer_fn=fn) as srv:
        monkeypatch.setattr(run, "POLICY", replace(run.POLICY, squeeze_min_tokens=30))
        use_chat(use_settings, srv, answer_context_squeeze="true")
        res = ask(corpus)
        squeezes = [b for b in srv.stats.bodies if system_of(b) == SQUEEZE_PROMPT]
        prompt = user_text(answer_bodies(srv)[-1])
    assert len(squeezes) == 1  # only the merged "guide" passage is long enough
    assert "squeeze" in res.timings_ms and "squeezed_tokens" in next(
        p for p in res.trace["context"]["passages"] if p["doc_id"] == "guide"
    )
    assert "Кэш хранит результат вычисления" not in prompt.split('doc_id="guide"')[1].split("</document>")[0]
    # the citation still names the chunk of the original text
    assert [(c.doc_id, c.chunk_no) for c in res.citations] == [("guide", 2)]


def test_generator_judge_removes_unsupported_sentences_and_past_the_threshold_refuses(corpus, use_settings):
    def answer(b):
        n = passage_of(b, "guide")
        return f"Кэш хранит результат вычисления [{n}]. Кэш живёт ровно сорок секунд [{n}]."

    def judge(verdicts):
        return lambda b: json.dumps(
            {"verdicts": [{"i": i, "supported": v} for i, v in enumerate(verdicts, 1)]}
        )

    removed_before = m.UNGROUNDED_SENTENCES.labels(judge="generator")._value.get()
    trimmed_before = m.UNGROUNDED_ANSWERS.labels(judge="generator", outcome="trimmed")._value.get()
    with LoopbackServer(answer_fn=model(answer, judge([True, False]))) as srv:
        use_chat(use_settings, srv, answer_grounding="generator", answer_min_confidence=0)
        res = ask(corpus)
        judged = [b for b in srv.stats.bodies if system_of(b) == JUDGE_PROMPT]
    assert not res.no_answer and res.removed_sentences == ["Кэш живёт ровно сорок секунд."]
    assert "сорок" not in res.answer and "Кэш хранит результат вычисления" in res.answer
    assert res.trace["grounding"]["judge"] == "generator" and res.trace["grounding"]["unsupported"] == 1
    assert "grounding" in res.timings_ms and len(judged) == 1
    # the judge saw the claims and the cited passage as escaped data
    assert '<claim i="2"' in user_text(judged[0]) and "doc_id" not in user_text(judged[0])
    assert m.UNGROUNDED_SENTENCES.labels(judge="generator")._value.get() == removed_before + 1
    assert (
        m.UNGROUNDED_ANSWERS.labels(judge="generator", outcome="trimmed")._value.get() == trimmed_before + 1
    )
    assert res.confidence is not None and res.confidence < 1

    with LoopbackServer(answer_fn=model(answer, judge([False, False]))) as srv:
        use_chat(use_settings, srv, answer_grounding="generator")
        res = ask(corpus)
    assert res.no_answer and res.citations == [] and "2 of 2 sentences" in res.reason
    assert "сорок" not in res.answer and len(res.removed_sentences) == 2


def test_a_judge_answering_garbage_falls_back_to_the_lexical_check(corpus, use_settings):
    fn = model(
        lambda b: f"Кэш хранит результат вычисления [{passage_of(b, 'guide')}]. Луна сделана из сыра [1].",
        judge=lambda b: "Не знаю, что ответить.",
    )
    with LoopbackServer(answer_fn=fn) as srv:
        use_chat(use_settings, srv, answer_grounding="generator", answer_min_confidence=0)
        res = ask(corpus)
    assert res.degraded and any(r.startswith("grounding: ValueError") for r in res.degraded_reasons)
    assert res.trace["grounding"]["judge"] == "lexical"
    assert res.removed_sentences == ["Луна сделана из сыра."] and "Кэш хранит" in res.answer


def test_self_consistency_keeps_the_answer_the_samples_agree_on(corpus, use_settings):
    calls = []

    def answer(b):
        calls.append(1)
        n = passage_of(b, "guide")
        return [
            "Кэш браузера хранит файлы [3].",  # the first sample is the odd one out
            f"Метод вызывается при каждой перерисовке [{n}].",
            f"Метод вызывается при каждой перерисовке, а свойство кэшируется [{n}].",
        ][(len(calls) - 1) % 3]

    # off by default: one answer call
    with LoopbackServer(answer_fn=model(answer)) as srv:
        use_chat(use_settings, srv)
        res = ask(corpus)
        assert len(answer_bodies(srv)) == 1 and "self_consistency" not in res.trace
    calls.clear()
    with LoopbackServer(answer_fn=model(answer)) as srv:
        use_chat(use_settings, srv, answer_self_consistency=3)
        res = ask(corpus)
        n_answers = len(answer_bodies(srv))
    sc = res.trace["self_consistency"]
    assert n_answers == 3 and sc["samples"] == 3 and sc["extra_calls"] == 2 and sc["chosen"] != 0
    assert "Метод вызывается" in res.answer and "self_consistency" in res.timings_ms
    assert res.trace["generator"]["input_tokens"] == 300  # three calls' tokens: the cost


def test_low_confidence_answer_becomes_no_answer_with_the_reason(corpus, use_settings, monkeypatch):
    fn = model(
        lambda b: f"Кэш хранит результат вычисления [{passage_of(b, 'guide')}]. Луна сделана из сыра [1]."
    )
    before = m.LOW_CONFIDENCE_ANSWERS._value.get()
    monkeypatch.setattr(run, "POLICY", replace(run.POLICY, max_unsupported_share=1))
    with LoopbackServer(answer_fn=fn) as srv:
        use_chat(use_settings, srv, answer_grounding="lexical")
        kept = ask(corpus)
        use_chat(use_settings, srv, answer_grounding="lexical", answer_min_confidence=0.9)
        refused = ask(corpus)
    assert not kept.no_answer and 0.4 <= kept.confidence < 0.9
    assert kept.trace["confidence"]["support"] == 0.5
    assert (
        refused.no_answer
        and refused.citations == []
        and refused.answer == "В базе знаний нет ответа на этот вопрос."
    )
    assert refused.reason.startswith(f"confidence {kept.confidence:.2f} is below the minimum 0.9")
    assert m.LOW_CONFIDENCE_ANSWERS._value.get() == before + 1


def test_without_a_check_or_rerank_scores_a_paraphrase_is_not_withheld(corpus, use_settings):
    """Few of the question's words in the cited passage is no evidence against the answer: with no
    groundedness check and no reranker, the confidence is reported and the answer kept."""
    fn = model(lambda b: f"Кэш хранит результат вычисления [{passage_of(b, 'guide')}].")
    with LoopbackServer(answer_fn=fn) as srv:
        use_chat(use_settings, srv, answer_grounding="off", answer_min_confidence=0.99)
        res = service.ask(
            AskRequest(
                query="кэш и ещё много посторонних слов", tenant=corpus, groups=["g"], k=7, mode="lexical"
            )
        )
    assert not res.no_answer and res.citations, res.reason
    assert res.trace["confidence"]["judged"] is False and res.confidence < 0.99


def test_extractive_answer_is_checked_structurally(corpus):
    res = ask(corpus)
    g = res.trace["grounding"]
    assert not res.no_answer and g["judge"] == "structural" and g["sentences"] >= 1 and g["unsupported"] == 0
    assert res.confidence is not None and res.confidence >= 0.5
    # every quoted sentence is in the chunk its citation names
    for c in res.citations:
        chunk = next(d for d in DOCS if d["doc_id"] == c.doc_id)
        text = (chunk.get("chunks") or [chunk.get("content")])[c.chunk_no]
        assert html.unescape(c.snippet)[:30] in text
