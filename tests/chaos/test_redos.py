"""ReDoS against a real query pool process (``ragline worker query`` on the threads pool, four
threads sharing one interpreter lock, as the review found it): worst-case 4,000-character questions
on every public entry point, each while another tenant searches. Each hostile question returns
within its deadline (answered or ``deadline exceeded``) and the other tenant's search completes
before that deadline. Results: the ``redos`` section of ``bench/results/chaos.json``.
"""

from __future__ import annotations

import pytest

from ragline.query.deadline import INTERRUPT_AFTER_S
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.client import RaglineClient
from ragline.shared.worker.celery_app import app
from tests.chaos import harness
from tests.integration.query_corpus import store_docs
from tests.integration.test_untrusted_text import DOCS, ENTRY_POINTS, HOSTILE, WORD, hostile_round
from tests.pools import start_pool, wait_ready

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

DEADLINE_S = 10.0


def test_hostile_questions_on_a_threads_pool_end_in_their_deadline(stack, conn, tenant, use_settings):
    other = f"{tenant}-other"
    store_docs(conn, tenant, DOCS)
    store_docs(conn, other, DOCS)
    use_settings(deadlines_question_s=DEADLINE_S, workers_query_pool="threads", workers_warmup="false")
    pool = start_pool(get_settings(), "query", concurrency=4, queue="query")  # where the SDK sends
    rows = []
    try:
        wait_ready(app, pool)
        url = stack.effective_redis_url()
        hits = RaglineClient(url, timeout=60).search(WORD, tenant, ["g"], mode="lexical").hits
        for entry in ENTRY_POINTS:
            for shape, question in sorted(HOSTILE.items()):
                result, hostile_s, other_s = hostile_round(
                    url, entry, question, tenant, other, hits, DEADLINE_S
                )
                rows.append(
                    {
                        "entry": entry,
                        "question": shape,
                        "chars": len(question),
                        "result": result,
                        "hostile_s": round(hostile_s, 2),
                        "other_tenant_search_s": round(other_s, 2),
                    }
                )
        assert pool.proc.poll() is None, "the query pool died"
    finally:
        pool.stop()
        harness.record("redos", rows)
    for row in rows:
        assert row["result"] in ("answered", "deadline exceeded"), row
        assert row["hostile_s"] < DEADLINE_S + INTERRUPT_AFTER_S, row
        assert row["other_tenant_search_s"] < DEADLINE_S, row
