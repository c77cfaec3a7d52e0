"""An answer over a scope whose rows partly await their vectors says so, and its confidence reads the
scope's awaiting share as measured (docs/evaluation.md, "Scopes awaiting their vectors"): an answer
quoting another language than the question's is trusted less than the same answer over the scope
fully embedded (only the vector search finds across languages, and it saw only part of the scope);
one in the question's language keeps its confidence. A matrix over the ask paths (the planned ask,
the agentic loop) and the two languages of a question.

Real Postgres (the ``stack`` fixtures), the documents stored through the real upsert with the
loopback embedder's vectors; the rows that await their vectors are left as the deferred ingest
leaves them (``embedding`` NULL). The answer reads the first hit (the answer's own document, which
keeps its vector) and the scope is small enough that no hit stands against a background (``hit_z``
unknown both times), so the answer and every feature the composer measures are the same in both
states: what changes is the scope's awaiting share."""

from __future__ import annotations

import pytest

from ragline.query import service
from ragline.query.service import awaiting_reason
from ragline.shared.sdk.contracts import AskRequest, AskResponse
from tests.integration.query_corpus import store_docs

ANSWER_DOC = "guide/retries.md"
DOCS = [
    {
        "doc_id": ANSWER_DOC,
        "content": "Клиент повторяет запрос после ошибки 429 с паузой из заголовка Retry-After.",
    },
    {"doc_id": "guide/colors.md", "content": "Палитра интерфейса задаётся переменными темы оформления."},
    {"doc_id": "guide/fonts.md", "content": "Шрифты подключаются из каталога статических файлов сборки."},
    {
        "doc_id": "guide/icons.md",
        "content": "Иконки рисуются векторной графикой и масштабируются без потерь.",
    },
    {
        "doc_id": "guide/layout.md",
        "content": "Сетка страницы делит экран на двенадцать колонок равной ширины.",
    },
]
QUESTIONS = {
    "question's language": "Когда клиент повторяет запрос после ошибки 429?",
    "another language": "How long does the client wait after error 429?",
}


def ask(tenant: str, question: str, agentic: bool) -> AskResponse:
    return service.ask(AskRequest(query=question, tenant=tenant, groups=["g"], k=1, agentic=agentic))


@pytest.mark.parametrize("language", list(QUESTIONS))
@pytest.mark.parametrize("agentic", [False, True], ids=["planned", "agentic"])
def test_an_answer_over_a_scope_awaiting_vectors_reads_the_share(conn, tenant, voyage, agentic, language):
    voyage(answer_min_confidence=0)  # every answer given: the confidences are compared, not judged
    store_docs(conn, tenant, DOCS)
    full = ask(tenant, QUESTIONS[language], agentic)
    conn.execute(
        "UPDATE chunks SET embedding = NULL WHERE tenant = %s AND doc_id <> %s", (tenant, ANSWER_DOC)
    )
    conn.commit()
    partial = ask(tenant, QUESTIONS[language], agentic)

    assert not full.no_answer and not partial.no_answer and partial.answer == full.answer
    assert [c.doc_id for c in partial.citations] == [ANSWER_DOC]
    assert not [r for r in full.degraded_reasons if r.startswith("vectors pending")]
    assert awaiting_reason(len(DOCS) - 1) in partial.degraded_reasons and partial.degraded
    assert (full.unembedded_rows, full.vectors_complete) == (0, True)
    assert (partial.unembedded_rows, partial.vectors_complete) == (len(DOCS) - 1, False)
    features = {k: dict(r.trace["confidence"]["features"]) for k, r in (("full", full), ("partial", partial))}
    assert features["full"].pop("awaiting") == 0.0
    assert features["partial"].pop("awaiting") == pytest.approx((len(DOCS) - 1) / len(DOCS), abs=1e-3)
    assert features["full"] == features["partial"] and features["full"]["hit_z"] is None
    assert partial.confidence is not None and full.confidence is not None
    if language == "another language":
        assert features["full"]["cross"] == 1.0 and partial.confidence < full.confidence
    else:
        assert features["full"]["cross"] == 0.0 and partial.confidence == full.confidence
