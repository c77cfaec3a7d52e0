"""The grounding benchmark's scripted run (bench/grounding.py) on a few ru-docs questions: two
Markdown documents through the Celery ingest tasks, a scripted OpenAI-compatible chat model that
adds one unsupported sentence to every other answer, the offline lexical judge."""

from __future__ import annotations

import pytest

from bench import grounding as bench
from tests.loopback import LoopbackServer, loopback_voyage_env

FILES = ["vue3-docs-ru/guide/built-ins/suspense.md", "owasp-top10-2017-ru/md/0xa1-injection.md"]
pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not bench.RU_DOCS.is_dir(), reason="ru-docs dataset not present"),
]


@pytest.fixture(scope="module")
def corpus(celery_worker, stack):
    tenant = "t-grounding-bench"
    with loopback_voyage_env():
        bench.ingest(tenant, FILES, timeout=240)
        yield tenant


def test_scripted_run_catches_the_injected_sentences(corpus, use_settings):
    cases = [c for c in bench.load_cases() if c.doc in FILES]
    assert len(cases) == 5
    with LoopbackServer(answer_fn=bench.ScriptedModel(cases, inject_every=2)) as chat:
        use_settings(
            embed_provider="voyage",
            providers_voyage_base_url=chat.url + "/v1",  # the same loopback server embeds the questions
            providers_voyage_api_key="k",
            answer_provider="openai",
            providers_openai_base_url=chat.url,
            providers_openai_api_key="k",
            answer_grounding="lexical",
        )
        out = bench.run_cases(corpus, cases, chat.url, inject_every=2)
    assert out["answered"] == 5 and out["injected"] == 3
    assert out["caught"] == 3, [r for r in out["rows"] if r["injected"] and not r["caught"]]
    assert all(r["cites_reference_doc"] or r["no_answer"] for r in out["rows"])
    assert out["facts_wrongly_removed"] <= out["facts"] and "grounding" in out["latency"]


def test_extractive_answers_hold_structurally_and_are_unchanged_by_the_stages(corpus, use_settings):
    with LoopbackServer() as emb:
        use_settings(
            embed_provider="voyage", providers_voyage_base_url=emb.url + "/v1", providers_voyage_api_key="k"
        )
        out = bench.extractive_check(corpus, [c for c in bench.load_cases() if c.doc in FILES])
    assert out["structural_violations"] == 0 and out["answers_changed_by_stages"] == 0, out["changed"]
