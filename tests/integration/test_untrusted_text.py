"""No unbounded work on untrusted text, through the real task contract and the SDK clients on the
session's threads pool (issue 49, findings 3 and 9):

* a worst-case 4,000-character question on each public entry point (search, ask, the streamed ask,
  rerank) returns, answered or refused with a typed error, within its deadline, while another
  tenant's search on the same pool completes before that deadline;
* every entry point that reaches the reranker goes through the tenant's admission, and a rerank
  request is held to a search's size (at most 200 candidates, each of bounded size).

:func:`hostile_round` is shared with the chaos suite (tests/chaos/test_redos.py), which runs it
against a real query pool process.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from ragline.query.deadline import INTERRUPT_AFTER_S
from ragline.shared.sdk.async_client import AsyncRaglineClient
from ragline.shared.sdk.client import RaglineClient, RaglineError
from ragline.shared.sdk.contracts import Hit
from ragline.shared.sdk.names import TASK_QUERY_RERANK
from tests.integration.query_corpus import store_docs
from tests.loopback import LoopbackServer

WORD = "ретраи"
DOCS = [{"doc_id": f"d{i}.md", "content": f"{WORD} после ошибки 429, вариант {i}."} for i in range(3)]
MAX_QUESTION = 4000

#: questions of the longest allowed length, each the worst input of a pattern family that applies to
#: questions (a comparison's sides, a definition's subject, a question's parts, code-like words)
HOSTILE = {
    "compare": "compare" + " " * (MAX_QUESTION - 8) + "x",
    "difference": "difference between a" + " " * (MAX_QUESTION - 21) + "x",
    "definition": "what is x" + " " * (MAX_QUESTION - 10) + "?",
    "parts": "как" + " и" * ((MAX_QUESTION - 4) // 2) + "?",
    "camel": "Z" * MAX_QUESTION,
    "tokens": "_" * (MAX_QUESTION - 1) + "!",
    "versus": "a" + " " * (MAX_QUESTION - 3) + "vs",
}
ENTRY_POINTS = ("search", "ask", "ask_stream", "rerank")


def ask_stream(url: str, question: str, tenant: str, timeout: float) -> object:
    """The streamed ask through the asyncio client: its final event."""

    async def run() -> object:
        async with AsyncRaglineClient(url, timeout=timeout) as client:
            final = None
            async for event in client.ask_stream(question, tenant, ["g"], mode="lexical"):
                final = event
            return final

    return asyncio.run(run())


def entry_call(url: str, entry: str, hits: list[Hit], timeout: float) -> Callable[[str, str], object]:
    """``call(question, tenant)`` on one public entry point, through the SDK."""
    client = RaglineClient(url, timeout=timeout)
    calls: dict[str, Callable[[str, str], object]] = {
        "search": lambda q, t: client.search(q, t, ["g"], mode="lexical"),
        "ask": lambda q, t: client.ask(q, t, ["g"], mode="lexical"),
        "ask_stream": lambda q, t: ask_stream(url, q, t, timeout),
        "rerank": lambda q, t: client.rerank(q, hits, tenant=t),
    }
    return calls[entry]


def hostile_round(
    url: str, entry: str, question: str, tenant: str, other: str, hits: list[Hit], deadline: float
):
    """One hostile question on ``entry`` while ``other`` searches: ``(outcome, hostile_s, other_s)``,
    the seconds from the hostile question's start to each one's end; ``outcome`` is "answered" or
    the typed error the hostile question got."""
    outcome: dict[str, object] = {}
    call = entry_call(url, entry, hits, timeout=deadline * 6)

    def hostile() -> None:
        try:
            call(question, tenant)
            outcome["result"] = "answered"
        except RaglineError as exc:
            outcome["result"] = exc.error
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcome["result"] = repr(exc)
        outcome["done"] = time.monotonic()

    t0 = time.monotonic()
    thread = threading.Thread(target=hostile, daemon=True)
    thread.start()
    time.sleep(0.05)  # the hostile question is on the pool first
    found = RaglineClient(url, timeout=deadline * 6).search(WORD, other, ["g"], mode="lexical")
    other_s = time.monotonic() - t0
    assert [h.doc_id for h in found.hits], "the other tenant's search found nothing"
    thread.join(deadline * 6)
    assert not thread.is_alive(), f"the hostile {entry} question did not return in {deadline * 6:.0f} s"
    return outcome["result"], outcome["done"] - t0, other_s  # type: ignore[operator]


@pytest.fixture()
def tenants(conn, tenant):
    other = f"{tenant}-other"
    store_docs(conn, tenant, DOCS)
    store_docs(conn, other, DOCS)
    return tenant, other


@pytest.fixture()
def url(celery_worker, stack):
    return stack.effective_redis_url()


@pytest.mark.parametrize("shape", sorted(HOSTILE))
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_hostile_question_ends_in_its_deadline_and_another_tenant_stays_fast(
    tenants, url, use_settings, entry, shape
):
    deadline = 10.0
    use_settings(deadlines_question_s=deadline)
    tenant, other = tenants
    question = HOSTILE[shape]
    assert len(question) <= MAX_QUESTION
    hits = RaglineClient(url, timeout=60).search(WORD, tenant, ["g"], mode="lexical").hits
    result, hostile_s, other_s = hostile_round(url, entry, question, tenant, other, hits, deadline)
    assert result in ("answered", "deadline exceeded"), result
    assert hostile_s < deadline + INTERRUPT_AFTER_S, (hostile_s, other_s)
    assert other_s < deadline, (hostile_s, other_s)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_the_deadline_stops_a_cpu_bound_stage_on_every_entry_point(
    tenants, url, use_settings, monkeypatch, entry
):
    """A stage that computes without ever reaching a cooperative check (here the rerank stage,
    which every entry point reaches, replaced by a loop of pure Python) is stopped by the question's
    deadline: the question answers ``deadline exceeded`` soon after it, and another tenant's search
    meanwhile completes before it. Without the interrupt the loop runs its full minute."""
    import ragline.query.service as service

    def spin(*_args, **_kw):
        end = time.monotonic() + 60
        while time.monotonic() < end:
            pass

    deadline = 3.0
    tenant, other = tenants
    hits = RaglineClient(url, timeout=60).search(WORD, tenant, ["g"], mode="lexical", rerank=False).hits
    with LoopbackServer() as srv:
        voyage(use_settings, srv, deadlines_question_s=deadline)
        monkeypatch.setattr(service, "rerank_stage", spin)
        call = entry_call(url, entry, hits, timeout=120)
        outcome: dict[str, object] = {}

        def hostile() -> None:
            try:
                call(f"{WORD} после ошибки", tenant)
                outcome["result"] = "answered"
            except RaglineError as exc:
                outcome["result"] = exc.error
            outcome["s"] = time.monotonic() - t0

        t0 = time.monotonic()
        thread = threading.Thread(target=hostile, daemon=True)
        thread.start()
        time.sleep(0.2)
        RaglineClient(url, timeout=60).search(WORD, other, ["g"], mode="lexical", rerank=False)
        other_s = time.monotonic() - t0
        thread.join(90)
    assert outcome.get("result") == "deadline exceeded", outcome
    assert outcome["s"] < deadline + INTERRUPT_AFTER_S + 5, outcome  # the loop alone would take 60 s
    assert other_s < deadline, other_s


# ------------------------------------------------------------------------------ rerank limits


def voyage(use_settings, srv: LoopbackServer, **kw) -> None:
    use_settings(
        rerank_provider="voyage",
        providers_voyage_api_key="test-key",
        providers_voyage_base_url=srv.url,
        rerank_timeout_s=5,
        **kw,
    )


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_path_to_the_reranker_passes_the_tenant_admission(tenants, url, use_settings, entry):
    """One question per 100 s per tenant: the first reaches the reranker, the second is refused
    before it, on each entry point that reaches rerank."""
    tenant, _ = tenants
    hits = RaglineClient(url, timeout=60).search(WORD, tenant, ["g"], mode="lexical", rerank=False).hits
    with LoopbackServer() as srv:
        voyage(use_settings, srv, admission_tenant_rate=0.01, admission_tenant_burst=1)
        call = entry_call(url, entry, hits, timeout=60)
        call(f"{WORD} после ошибки", tenant)
        reached = srv.stats.by_path.get("/v1/rerank", 0)
        assert reached == 1, srv.stats.by_path
        with pytest.raises(RaglineError) as err:
            call(f"{WORD} после ошибки", tenant)
        assert err.value.error == "rate limited"
        assert srv.stats.by_path.get("/v1/rerank", 0) == reached


def _hit(i: int, **kw) -> dict:
    return {"doc_id": f"d{i}.md", "chunk_no": 0, "content": f"{WORD} {i}", **kw}


OVERSIZED = {
    "too many hits": [_hit(i) for i in range(201)],
    "one hit of 2 MB content": [_hit(0, content="x" * (2 << 20)), _hit(1)],
    "one hit of 2 MB context": [_hit(0), _hit(1, context="y" * (2 << 20))],
    "one hit of 2 MB metadata": [_hit(0, metadata={"blob": "z" * (2 << 20)})],
}


@pytest.mark.parametrize("case", sorted(OVERSIZED))
def test_a_rerank_request_is_held_to_a_search_size(tenants, url, use_settings, case):
    from ragline.shared.worker.celery_app import app

    tenant, _ = tenants
    with LoopbackServer() as srv:
        voyage(use_settings, srv)
        payload = {"query": WORD, "tenant": tenant, "hits": OVERSIZED[case]}
        res = app.send_task(TASK_QUERY_RERANK, args=[payload]).get(timeout=60)
        assert res["ok"] is False and res["error"] == "invalid payload", str(res)[:300]
        assert srv.stats.by_path.get("/v1/rerank", 0) == 0
        # the largest allowed request is served
        payload["hits"] = [_hit(i) for i in range(200)]
        res = app.send_task(TASK_QUERY_RERANK, args=[payload]).get(timeout=60)
        assert "hits" in res and srv.stats.by_path.get("/v1/rerank", 0) == 1, str(res)[:300]
