"""Hostile HTML in answers, end to end: a scripted chat model (loopback Anthropic server) answers
each question with one payload of :data:`tests.unit.test_sanitize.HOSTILE`, citing a stored chunk
that contains every word the payloads use as a URL, and ``ask`` runs on the real stack (Postgres,
retrieval, context, grounding, sanitizer). Whatever ``ask`` returns, answer or refusal, must render
(two CommonMark renderers with raw HTML on) to nothing but the elements Markdown builds itself.
Results: the ``attacks_answers`` section of ``bench/results/chaos.json``.
"""

from __future__ import annotations

import pytest

from ragline.query import service
from ragline.shared.sdk.contracts import AskRequest
from tests.chaos import harness
from tests.integration.query_corpus import store_docs
from tests.integration.test_grounded_answers import model, passage_of
from tests.loopback import LoopbackServer
from tests.unit.test_sanitize import HOSTILE, WORDY, assert_inert

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

QUESTION = "что описывает раздел x и слова javascript url style"


def test_hostile_html_answers_come_out_inert(conn, tenant, use_settings):
    store_docs(conn, tenant, [{"doc_id": "wordy", "path": "wordy.md", "content": WORDY}])
    current = {"payload": ""}

    def answer(body: dict) -> str:
        n = passage_of(body, "wordy")
        return f"Раздел x описывает a, b и 1 [{n}]. {current['payload']} Слова: javascript, url, style [{n}]."

    rows, returned = [], 0
    with LoopbackServer(answer_fn=model(answer)) as srv:
        use_settings(
            answer_provider="anthropic", providers_anthropic_api_key="k", providers_anthropic_base_url=srv.url
        )
        for payload in HOSTILE:
            current["payload"] = payload
            res = service.ask(AskRequest(query=QUESTION, tenant=tenant, groups=["g"], k=3, mode="lexical"))
            assert_inert(res.answer, [WORDY])
            returned += not res.no_answer
            rows.append(
                {
                    "attack": f"answer with {payload[:60]!r}",
                    "status": "inert" + ("" if not res.no_answer else " (refused)"),
                    "error": None,
                }
            )
    # the stages before the sanitizer must not hide it: most payloads reach it inside an answer
    assert returned >= len(HOSTILE) // 2, returned
    rows.append(
        {
            "attack": f"hostile HTML answers ({len(HOSTILE)} payloads)",
            "status": f"{len(HOSTILE)} inert, {returned} returned as answers",
            "error": None,
        }
    )
    harness.record("attacks_answers", rows)
