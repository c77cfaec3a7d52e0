"""Query-path limits through the real query tasks: a statement timeout, the question's deadline in
the threads pool (the session worker) and in a solo pool (a real ``celery worker --pool solo``
process), per-tenant admission, the lexical term cap."""

from __future__ import annotations

import time

import pytest

from ragline.query.admission import RateLimited, get_admission
from ragline.query.retrieval import sql
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.client import RaglineClient, RaglineError
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.sdk.names import TASK_QUERY_ASK
from ragline.shared.worker import db
from ragline.shared.worker.celery_app import app
from tests.integration.query_corpus import store_docs
from tests.loopback import Faults, LoopbackServer

WORD = "ретраи"
DOCS = [
    {"doc_id": f"d{i}.md", "content": f"{WORD} после ошибки 429, вариант {i}. Клиент повторяет запрос."}
    for i in range(3)
]


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, DOCS)
    return tenant


@pytest.fixture()
def client(celery_worker, stack):
    return RaglineClient(stack.effective_redis_url(), timeout=60)


@pytest.fixture()
def slow_statements(monkeypatch):
    """Every retrieval statement sleeps a second per row it looks at: a deliberately slow query."""
    monkeypatch.setattr(sql, "SCOPE", "pg_sleep(1) IS NOT NULL AND " + sql.SCOPE)


def test_a_slow_statement_is_cancelled_with_a_typed_error(corpus, client, use_settings, slow_statements):
    use_settings(deadlines_statement_timeout_ms=300, deadlines_question_s=30)
    t = time.perf_counter()
    with pytest.raises(RaglineError) as err:
        client.search(WORD, tenant=corpus, groups=["g"], mode="lexical")
    took = time.perf_counter() - t
    assert err.value.error == "retrieval timeout" and err.value.detail["timeout_ms"] == 300
    assert "lexical search" in err.value.detail["message"]
    assert took < 1.5  # not the three seconds the statement asked for
    # the cancelled transaction left its pooled connection clean: no setting outlived it
    with db.query_connection() as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()["statement_timeout"] == "0"
        assert conn.execute("SELECT current_setting('ragline.tenant', true) AS t").fetchone()["t"] in (
            "",
            None,
        )


def test_the_question_deadline_bounds_the_statement_too(corpus, client, use_settings, slow_statements):
    use_settings(deadlines_statement_timeout_ms=10_000, deadlines_question_s=0.5)
    t = time.perf_counter()
    with pytest.raises(RaglineError) as err:
        client.search(WORD, tenant=corpus, groups=["g"], mode="lexical")
    assert err.value.error == "deadline exceeded" and time.perf_counter() - t < 1.5


def test_the_direct_call_keeps_its_own_limit(corpus, use_settings, slow_statements):
    """Outside a task (no question deadline) the setting alone bounds each statement."""
    use_settings(deadlines_statement_timeout_ms=200)
    from ragline.query import service
    from ragline.query.deadline import RetrievalTimeout

    with pytest.raises(RetrievalTimeout):
        service.search(SearchRequest(query=WORD, tenant=corpus, groups=["g"], mode="lexical", k=3))


def openai(use_settings, srv, **kw) -> None:
    use_settings(
        answer_provider="openai",
        providers_openai_base_url=srv.url,
        providers_openai_api_key="k",
        answer_openai_model="m",
        **kw,
    )


def test_a_hanging_generator_is_cut_at_the_question_deadline_threads_pool(corpus, client, use_settings):
    with LoopbackServer(faults=Faults(hang_s=4)) as srv:
        openai(use_settings, srv, deadlines_question_s=1.0)
        t = time.perf_counter()
        res = client.ask(f"{WORD} после ошибки", tenant=corpus, groups=["g"], mode="lexical")
        took = time.perf_counter() - t
        assert srv.stats.by_path.get("/v1/chat/completions") == 1  # the generator really was called
    assert took < 2.5, took  # the answer did not wait for the generator's 4 s
    assert res.degraded and any("QuestionDeadlineExceeded" in r for r in res.degraded_reasons)
    assert res.citations and not res.no_answer  # the extractive answer, from what was retrieved in time


def test_the_question_deadline_holds_in_a_solo_pool(corpus, use_settings):
    """A real solo query process (``ragline worker query``; Celery enforces no time limit there)
    answers within the deadline."""
    from tests.pools import start_pool, wait_ready

    with LoopbackServer(faults=Faults(hang_s=4)) as srv:
        openai(use_settings, srv, deadlines_question_s=1.0, workers_query_pool="solo", workers_warmup="false")
        pool = start_pool(get_settings(), "query")
        try:
            assert pool.proc.args[pool.proc.args.index("--pool") + 1] == "solo"
            wait_ready(app, pool)
            payload = {"query": f"{WORD} после ошибки", "tenant": corpus, "groups": ["g"], "mode": "lexical"}
            t = time.perf_counter()
            res = app.send_task(TASK_QUERY_ASK, args=[payload], queue=pool.queue).get(timeout=60)
            took = time.perf_counter() - t
            assert srv.stats.by_path.get("/v1/chat/completions") == 1
        finally:
            pool.stop()
    assert took < 2.5, took
    assert res["degraded"] and any("QuestionDeadlineExceeded" in r for r in res["degraded_reasons"])
    assert res["citations"]


def test_a_flooding_tenant_is_rate_limited_and_the_other_is_not(corpus, client, conn, use_settings):
    quiet = corpus + "-quiet"
    store_docs(conn, quiet, DOCS)
    use_settings(admission_tenant_rate=1, admission_tenant_burst=2)
    outcomes = []
    for _ in range(5):
        try:
            client.search(WORD, tenant=corpus, groups=["g"], mode="lexical")
            outcomes.append("ok")
        except RaglineError as exc:
            assert exc.error == "rate limited" and 0 < exc.detail["retry_after_s"] <= 2
            assert exc.detail["tenant"] == corpus
            outcomes.append("limited")
    assert outcomes == ["ok", "ok", "limited", "limited", "limited"]
    # the other tenant has its own budget
    assert client.search(WORD, tenant=quiet, groups=["g"], mode="lexical").hits
    assert client.ask(f"{WORD} после ошибки", tenant=quiet, groups=["g"], mode="lexical").citations


def test_questions_in_flight_are_counted_across_workers(corpus, client, use_settings):
    """A slot held here (another worker, as far as Redis knows) refuses the task's question."""
    use_settings(admission_tenant_max_in_flight=1)
    admission = get_admission()
    with admission.admit(corpus):
        with pytest.raises(RaglineError) as err:
            client.search(WORD, tenant=corpus, groups=["g"], mode="lexical")
        assert err.value.error == "rate limited" and "in flight" in err.value.detail["message"]
        with pytest.raises(RateLimited):
            with admission.admit(corpus):
                pass
        with admission.admit(corpus + "-other"):  # another tenant is not affected
            pass
    assert client.search(WORD, tenant=corpus, groups=["g"], mode="lexical").hits  # the slot was released


def test_admission_is_off_by_default(corpus, client):
    assert not get_admission().enabled
    for _ in range(5):
        assert client.search(WORD, tenant=corpus, groups=["g"], mode="lexical").hits


def test_lexical_terms_past_the_cap_are_not_searched(corpus, use_settings):
    from ragline.query import service

    filler = " ".join(f"заполнитель{i}" for i in range(40))
    use_settings(lexical_max_terms=32)
    late = SearchRequest(query=f"{filler} {WORD}", tenant=corpus, groups=["g"], mode="lexical", k=3)
    early = SearchRequest(query=f"{WORD} {filler}", tenant=corpus, groups=["g"], mode="lexical", k=3)
    assert service.search(late).hits == []  # the 41st distinct word was cut off
    assert len(service.search(early).hits) == 3
    use_settings(lexical_max_terms=100)
    assert len(service.search(late).hits) == 3
    assert get_settings().lexical.max_terms == 100


@pytest.mark.slow
def test_fairness_bench_smoke(celery_worker, tmp_path, monkeypatch):
    """The tiny fairness benchmark on the session worker: its structure, never its timings."""
    import json

    from bench import common, fairness

    monkeypatch.setattr(common, "EXTERNAL_WORKER", True)
    data = fairness.run(out_dir=tmp_path, **fairness.SMOKE)
    assert json.loads((tmp_path / "fairness.json").read_text())["benchmark"] == "fairness"
    assert (tmp_path / "fairness.png").read_bytes()[:4] == b"\x89PNG"
    configs = data["raw"]["configs"]
    assert set(configs) == {"off", "on"}
    for cfg in configs.values():
        assert cfg["b_alone"]["n"] > 0 and cfg["b_while_a_floods"]["n"] > 0
        assert cfg["b_alone"]["b_failed"] == cfg["b_while_a_floods"]["b_failed"] == 0
        assert sum(cfg["a"]["sent"]) > 0 and sum(cfg["a"]["other"]) == 0
    assert sum(configs["off"]["a"]["refused"]) == 0  # admission off: nothing refused
    assert sum(configs["on"]["a"]["refused"]) >= 1  # on: the flood's excess is refused
    assert configs["on"]["b_alone"]["b_refused"] == configs["on"]["b_while_a_floods"]["b_refused"] == 0
    assert data["raw"]["embedder_requests"] > 0  # every question embedded through the loopback server
    for t in data["targets"]:
        assert t["passed"] is (
            t["measured"] <= t["threshold"] if t["op"] == "<=" else t["measured"] >= t["threshold"]
        )
