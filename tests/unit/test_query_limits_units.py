"""Pure parts of the query-path limits: the lexical term cap, the rerank input bounds, the question
deadline, the tenant rate window."""

from __future__ import annotations

import threading
import time

import pytest

from ragline.query.admission import rate_window
from ragline.query.deadline import (
    DeadlineExceeded,
    QuestionDeadlineExceeded,
    check,
    question_deadline,
    remaining_s,
    run_with_deadline,
    statement_timeout_ms,
)
from ragline.query.retrieval.filters import cap_terms, lexical_query
from ragline.query.retrieval.rerank import bounded_inputs, rerank_hits
from ragline.shared.sdk.contracts import Hit


# ----------------------------------------------------------------------------------- lexical cap
def test_cap_terms_keeps_the_first_distinct_words():
    words = " ".join(f"слово{i}" for i in range(1000))
    assert cap_terms(words, 3) == "слово0 слово1 слово2"
    # repeats, case and stress marks do not count twice; "or" is an operator, not a term
    assert cap_terms("Кто кто КТО or ударе́ние ударение третье четвёртое", 3) == (
        "Кто кто КТО or ударе́ние ударение третье"
    )
    assert cap_terms("мало слов", 32) == "мало слов"
    assert cap_terms("", 5) == ""


def test_lexical_query_has_at_most_max_terms():
    text = " ".join(f"w{i}" for i in range(500))
    assert lexical_query(text, max_terms=4) == "w0 or w1 or w2 or w3"
    assert lexical_query(text).count(" or ") == 499  # no cap asked: unchanged behaviour
    # websearch syntax survives a cut: no dangling operator at the end
    assert lexical_query('"точная фраза" -минус плюс', "all", max_terms=2) == '"точная фраза"'
    assert lexical_query('"точная фраза" -минус плюс', "all", max_terms=3) == '"точная фраза" -минус'


# -------------------------------------------------------------------------------- rerank bounds
def _hits(n: int, chars: int) -> list[Hit]:
    return [Hit(doc_id=f"d{i}", chunk_no=0, heading=f"h{i}", content="ж" * chars) for i in range(n)]


def test_bounded_inputs_cut_count_and_length():
    kept, texts = bounded_inputs(_hits(300, 10_000), max_candidates=100, max_chars=2000)
    assert [h.doc_id for h in kept] == [f"d{i}" for i in range(100)]
    assert len(texts) == 100 and all(len(t) == 2000 for t in texts)
    assert texts[0].startswith("h0\nжж")
    kept, texts = bounded_inputs(_hits(3, 10), 100, 2000)
    assert len(kept) == 3 and texts[0] == "h0\n" + "ж" * 10


class RecordingReranker:
    def __init__(self) -> None:
        self.documents: list[str] = []

    def rerank(self, query: str, documents: list[str], top_k: int) -> list[tuple[int, float]]:
        self.documents = documents
        # the last document it was given scores best: its index must map back to the right hit
        return [(i, float(i)) for i in range(len(documents))]


def test_rerank_sends_only_the_bounded_candidates():
    reranker = RecordingReranker()
    out = rerank_hits(reranker, "q", _hits(300, 5000), 3, 0.0, 2.0, max_candidates=50, max_chars=100)
    assert len(reranker.documents) == 50 and max(len(d) for d in reranker.documents) == 100
    assert [h.doc_id for h in out.hits] == ["d49", "d48", "d47"] and not out.degraded


# ------------------------------------------------------------------------------------- deadline
def test_question_deadline_bounds_provider_calls_and_nests():
    assert remaining_s() is None
    with question_deadline(0.2):
        t = time.perf_counter()
        with pytest.raises(QuestionDeadlineExceeded):
            run_with_deadline(time.sleep, 5.0, 1.0)  # the call's own timeout is longer: the question's wins
        assert time.perf_counter() - t < 0.5
        with pytest.raises(QuestionDeadlineExceeded):
            check("generation")  # no time left for a further stage
        with pytest.raises(QuestionDeadlineExceeded):
            run_with_deadline(lambda: 1, 5.0)  # nor for a further call
    assert remaining_s() is None  # the deadline ended with its question
    with question_deadline(10):
        with question_deadline(0):  # no own deadline: the enclosing one still holds
            assert 9 < remaining_s() <= 10
        with question_deadline(30):  # a nested deadline never extends the enclosing one
            assert remaining_s() <= 10
        # the call's own timeout is the shorter one: a plain timeout, which the stages degrade on
        with pytest.raises(DeadlineExceeded):
            run_with_deadline(time.sleep, 0.05, 1.0)


def test_each_thread_has_its_own_question_deadline():
    seen: dict[str, float | None] = {}

    def other() -> None:
        seen["other"] = remaining_s()

    with question_deadline(5):
        th = threading.Thread(target=other)
        th.start()
        th.join()
    assert seen == {"other": None}


def test_statement_timeout_follows_the_nearer_limit():
    assert statement_timeout_ms(2000) == (2000, False)
    assert statement_timeout_ms(0) == (0, False)  # no limit outside a question
    with question_deadline(0.5):
        ms, by_deadline = statement_timeout_ms(2000)
        assert by_deadline and 400 < ms <= 500
        ms, by_deadline = statement_timeout_ms(0)  # no setting: the deadline still bounds the statement
        assert by_deadline and ms <= 500
        assert statement_timeout_ms(100) == (100, False)


# ------------------------------------------------------------------------------------ admission
def test_rate_window():
    assert rate_window(0, 10) == (0, 0)  # off
    assert rate_window(10, 20) == (2, 20)  # 20 at once, 10 per second sustained
    assert rate_window(5, 0) == (1, 5)  # burst defaults to one second's worth
    assert rate_window(0.5, 1) == (2, 1)  # one question every two seconds
    assert rate_window(3, 5) == (2, 6)  # whole seconds: the burst rounds up to rate x window
    for rate, burst in ((10, 20), (5, 0), (0.5, 1), (3, 5), (100, 7)):
        window_s, questions = rate_window(rate, burst)
        assert questions >= max(burst, 1) and questions / window_s >= rate
