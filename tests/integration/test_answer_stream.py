"""Streamed answers on the real stack: the ask task on a Celery worker, Postgres retrieval, the
answer streamed from a loopback chat model in each provider's server-sent-event format into the
question's Redis stream, read back with the asyncio reader."""

from __future__ import annotations

import asyncio

import pytest

from ragline.query.answer.stream import HOLD_CHARS
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.answer_stream import (
    ANSWER,
    DELTA,
    ERROR,
    NO_ANSWER,
    AnswerEvent,
    AnswerStreamTimeout,
    read_answer,
    redis_client,
)
from ragline.shared.sdk.async_client import AsyncRaglineClient
from ragline.shared.sdk.client import RaglineTimeout
from ragline.shared.sdk.names import TASK_QUERY_ASK, answer_stream_key
from tests.integration.query_corpus import store_docs
from tests.sse_loopback import Script, StreamingChatServer

GOOD = "https://docs.example.org/retry"
DOCS = [
    {
        "doc_id": f"d{i}",
        "path": f"docs/d{i}.md",
        "heading": f"Раздел {i}",
        "content": f"ретраи вариант {i}. Клиент повторяет запрос после ошибки 429. Руководство: {GOOD}",
    }
    for i in range(1, 4)
]
QUESTION = "ретраи после ошибки 429"
# the evil link is split across deltas: no delta, and no prefix of them, may carry it
PIECES = [
    "Клиент повторяет ",
    "запрос [1]. Подробнее: [руко",
    f"водство]({GOOD[:14]}",
    f"{GOOD[14:]}) [2]. Не ходите [сюда](https://ev",
    "il.example/x?q=secret) [1].",
]


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, DOCS)
    return tenant


def chat(use_settings, provider: str, srv: StreamingChatServer, **kw) -> None:
    keys = (
        {"providers_anthropic_api_key": "test-key", "providers_anthropic_base_url": srv.url}
        if provider == "anthropic"
        else {
            "providers_openai_api_key": "k",
            "providers_openai_base_url": srv.url,
            "answer_openai_model": "m",
        }
    )
    # confidence and groundedness are other tests' business: every answer here passes them
    use_settings(answer_provider=provider, answer_min_confidence=0, answer_grounding="off", **keys, **kw)


def send(tenant: str, stream: bool = True, **kw):
    from ragline.shared.worker.celery_app import app

    payload = {"query": QUESTION, "tenant": tenant, "groups": ["g"], "k": 3, "mode": "lexical", **kw}
    if stream:
        payload["stream"] = True
    return app.send_task(TASK_QUERY_ASK, args=[payload])


def read(task_id: str, **kw) -> list[AnswerEvent]:
    async def run() -> list[AnswerEvent]:
        client = redis_client(get_settings().effective_redis_url())
        try:
            return [ev async for ev in read_answer(client, task_id, **kw)]
        finally:
            await client.aclose()

    return asyncio.run(run())


def redis_sync():
    import redis

    return redis.Redis.from_url(get_settings().effective_redis_url())


def text_of(events: list[AnswerEvent]) -> str:
    return "".join(e.text for e in events if e.type == DELTA)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_deltas_arrive_while_generating_then_the_final_answer(celery_worker, corpus, use_settings, provider):
    with StreamingChatServer(Script(PIECES, delay_s=0.15)) as srv:
        chat(use_settings, provider, srv)
        res = send(corpus)
        seen_before_done: list[bool] = []

        async def run() -> list[AnswerEvent]:
            client = redis_client(get_settings().effective_redis_url())
            out = []
            try:
                async for ev in read_answer(client, res.id, timeout=30):
                    seen_before_done.append(not res.ready())
                    out.append(ev)
            finally:
                await client.aclose()
            return out

        events = asyncio.run(run())
        result = res.get(timeout=30)
        body = srv.bodies[-1]
    assert body["stream"] is True
    assert [e.type for e in events][-1] == ANSWER and sum(e.final for e in events) == 1
    deltas = [e for e in events if e.type == DELTA]
    # the first deltas were read while the worker was still generating
    assert len(deltas) >= 3 and seen_before_done[0]
    shown = ""
    for d in deltas:
        shown += d.text
        assert "evil" not in shown and "secret" not in shown
    final = events[-1].response
    # the final answer is what the deltas spelled: a UI that showed them has nothing to replace
    assert shown == final.answer and f"[руководство]({GOOD})" in final.answer
    assert final.removed_links == ["https://evil.example/x?q=secret"]
    assert {c.n for c in final.citations} == {1, 2} and not final.no_answer
    assert final.trace["generator"]["generator"] == provider
    assert result["answer"] == final.answer  # the task's own result: the same response
    assert redis_sync().xlen(answer_stream_key(res.id)) == 0  # read once, then emptied (XTRIM)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize(
    "opening",
    [
        "Скобка [ так и не закрылась,",
        "В коде a[b[c] внешняя скобка открыта,",
        "Если n <limit, то",
        "\n\n[1] Клиент",
    ],
    ids=["lone-bracket", "nested-open", "comparison", "citation-first"],
)
def test_markup_left_open_does_not_stall_the_deltas(celery_worker, corpus, use_settings, provider, opening):
    """A chat model's answer that opens a "[" or "<" it never closes (or starts a paragraph with a
    citation) still streams: its later words arrive as deltas while it is being generated, not
    all at once with the final answer."""
    words = [f" слово{i}" for i in range(60)]
    pieces = ["Клиент повторяет запрос [1]. ", opening, *words, " конец [2]."]
    with StreamingChatServer(Script(pieces, delay_s=0.03)) as srv:
        chat(use_settings, provider, srv)
        events = read(send(corpus).id, timeout=60)
    deltas = [e.text for e in events if e.type == DELTA]
    final = events[-1].response
    assert events[-1].type == ANSWER and not final.no_answer, events[-1]
    assert "".join(deltas) == final.answer
    # the deltas after the one that opened the markup: word by word, not one at the end
    after = next(i for i, d in enumerate(deltas) if "слово0" in d)
    assert len(deltas) - after >= 20, deltas
    assert HOLD_CHARS < len("".join(words))


def test_late_reader_and_reconnect_miss_nothing_within_the_bounds(celery_worker, corpus, use_settings):
    pieces = [f"слово{i} " for i in range(30)] + ["[1]."]
    with StreamingChatServer(Script(pieces)) as srv:
        chat(use_settings, "openai", srv, answer_stream_maxlen=12, answer_stream_ttl_s=120)
        res = send(corpus)
        result = res.get(timeout=30)  # the reader comes after the answer is complete
    r = redis_sync()
    key = answer_stream_key(res.id)
    assert r.xlen(key) <= 12 and 0 < r.ttl(key) <= 120
    events = read(res.id, timeout=5, delete_at_end=False)
    assert events[-1].type == ANSWER and text_of(events) == result["answer"]
    assert result["answer"].startswith("слово0 слово1") and result["answer"].endswith("слово29 [1].")
    # a reader that saw the first three entries reconnects with the last id it has
    again = read(res.id, after=events[2].id, timeout=5)
    assert [e.id for e in again] == [e.id for e in events[3:]]
    assert r.xlen(key) == 0  # emptied by the reader that read its end


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize(
    "fault,why",
    [("cut_after", "RemoteProtocolError"), ("end_after", "cut before"), ("error_after", "error")],
)
def test_a_stream_that_breaks_off_ends_with_no_answer(
    celery_worker, corpus, use_settings, provider, fault, why
):
    """Part of the answer was shown when the provider stopped: no hang, no other answer put in
    its place, a no_answer saying why (a UI retracts the text it showed)."""
    with StreamingChatServer(Script(PIECES, **{fault: 2})) as srv:
        chat(use_settings, provider, srv)
        res = send(corpus)
        events = read(res.id, timeout=30)
        result = res.get(timeout=30)
    assert [e.type for e in events[:-1]] == [DELTA] * (len(events) - 1) and text_of(events)
    last = events[-1]
    assert last.type == NO_ANSWER and last.response.no_answer and last.response.citations == []
    assert provider in last.response.reason and why in last.response.reason
    if fault == "error_after":
        assert "overloaded_error" in last.response.reason
    assert last.response.degraded and result["no_answer"] and result["reason"] == last.response.reason


def test_a_provider_error_before_any_delta_falls_back_like_an_unstreamed_question(
    celery_worker, corpus, use_settings
):
    with StreamingChatServer(Script(PIECES, error_after=0)) as srv:
        chat(use_settings, "anthropic", srv)
        events = read(send(corpus).id, timeout=30)
    # nothing of the chat model was shown: the extractive answer, streamed sentence by sentence
    assert [e.type for e in events] == [DELTA] * (len(events) - 1) + [ANSWER], events[-1].response.reason
    resp = events[-1].response
    assert resp.trace["generator"]["generator"] == "extractive" and resp.citations
    assert any("generator" in r for r in resp.degraded_reasons)
    assert text_of(events) == resp.answer


@pytest.mark.parametrize("agentic", [False, True])
def test_the_default_generator_streams_its_answer_sentence_by_sentence(
    celery_worker, corpus, use_settings, agentic
):
    """No chat model: the composed answer still arrives as deltas (one per sentence of the
    project's splitter), then exactly one terminal entry, as the README promises."""
    from ragline.shared.worker.text import split_sentences

    use_settings(answer_min_confidence=0, answer_grounding="off")  # the default generator
    events = read(send(corpus, agentic=agentic).id, timeout=60)
    assert [e.type for e in events[:-1]] == [DELTA] * (len(events) - 1) and events[-1].type == ANSWER
    answer = events[-1].response.answer
    assert answer and text_of(events) == answer
    assert len(events) - 1 == len(split_sentences(answer)) >= 1


def test_citations_that_fail_validation_end_the_stream_with_no_answer(celery_worker, corpus, use_settings):
    with StreamingChatServer(Script(["Повторяйте запрос [1], ", "секрет из документа [7]."])) as srv:
        chat(use_settings, "anthropic", srv)
        events = read(send(corpus).id, timeout=30)
    assert text_of(events)  # shown as it came...
    last = events[-1]
    assert last.type == NO_ANSWER and "invalid citations [7]" in last.response.reason  # ...then retracted
    assert "секрет" not in last.response.answer and last.response.trace["rejected_citations"] == [7]


def test_a_refused_question_ends_the_stream_with_its_error(celery_worker, corpus, use_settings, monkeypatch):
    from ragline.query.retrieval import retrievers

    lexical_rows = retrievers.lexical_rows

    def slow(conn, *args, **kwargs):  # the deadline passes inside retrieval's SQL, however fast it is
        conn.execute("SELECT pg_sleep(0.05)")  # cut by the statement timeout the deadline sets
        return lexical_rows(conn, *args, **kwargs)

    monkeypatch.setattr(retrievers, "lexical_rows", slow)  # the in-process worker runs this module
    with StreamingChatServer(Script(PIECES)) as srv:
        chat(use_settings, "anthropic", srv, deadlines_question_s=0.001)
        res = send(corpus)
        events = read(res.id, timeout=30)
        result = res.get(timeout=30)
    assert [e.type for e in events] == [ERROR] and events[0].error == result["error"], (events, result)
    assert result["error"] in ("deadline exceeded", "retrieval timeout")

    async def via_client() -> None:  # AsyncRaglineClient.ask_stream raises what ask would
        client = AsyncRaglineClient(get_settings().effective_redis_url(), timeout=30)
        try:
            async for _ in client.ask_stream(QUESTION, tenant=corpus, groups=["g"], k=3, mode="lexical"):
                pass
        finally:
            await client.aclose()

    with pytest.raises(RaglineTimeout):
        asyncio.run(via_client())


def test_an_unstreamed_question_publishes_nothing(celery_worker, corpus, use_settings):
    with StreamingChatServer(Script(PIECES)) as srv:
        chat(use_settings, "anthropic", srv)
        res = send(corpus, stream=False)
        result = res.get(timeout=30)
        body = srv.bodies[-1]
    assert "stream" not in body and result["answer"].startswith("Клиент повторяет запрос [1]")
    assert not redis_sync().exists(answer_stream_key(res.id))
    with pytest.raises(AnswerStreamTimeout):
        read(res.id, timeout=0.3)
