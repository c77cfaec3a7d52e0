"""The agentic loop stops on its budget (rounds, searches, evidence) and on repeated queries; no provider."""

from __future__ import annotations

import pytest

from ragline.query.answer.agentic import Budget, CoveragePlanner, Decision, agentic_loop, parse_decision
from ragline.shared.sdk.contracts import Hit


class Corpus:
    """A fake searcher: every query returns k new hits, and records what was searched."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, q: str, k: int) -> list[Hit]:
        self.calls.append(q)
        return [Hit(doc_id=f"{q}-{i}", chunk_no=0, content=q) for i in range(k)]


class Scripted:
    def __init__(self, decisions: list[Decision]) -> None:
        self.decisions = decisions
        self.calls = 0

    def plan(self, question: str, evidence: list[Hit]) -> Decision:
        self.calls += 1
        return self.decisions[min(self.calls, len(self.decisions)) - 1]


def test_stops_on_max_rounds_with_partial():
    search = Corpus()
    never = Scripted([Decision(False, [f"q{i}"]) for i in range(1, 50)])
    res = agentic_loop(search, never, "вопрос", Budget(max_rounds=3, max_searches=100, max_evidence=100, k=2))
    assert res.partial and res.stop == "max_rounds" and res.rounds == 3 and never.calls == 3
    assert search.calls == ["вопрос", "q1", "q2"]


def test_stops_on_max_searches_even_with_many_fresh_queries():
    search = Corpus()
    greedy = Scripted(
        [Decision(False, ["a", "b", "c"]), Decision(False, ["d", "e", "f"]), Decision(False, ["g"])]
    )
    res = agentic_loop(search, greedy, "вопрос", Budget(max_rounds=10, max_searches=4, max_evidence=100, k=1))
    assert res.partial and res.stop == "max_searches" and res.searches == 4 and len(search.calls) == 4


def test_repeated_queries_stop_the_loop():
    search = Corpus()
    circles = Scripted([Decision(False, ["x"]), Decision(False, ["X ", "вопрос"])])
    res = agentic_loop(
        search, circles, "вопрос", Budget(max_rounds=10, max_searches=10, max_evidence=100, k=1)
    )
    assert res.partial and res.stop == "repeated_queries" and search.calls == ["вопрос", "x"]


def test_evidence_is_capped_and_deduplicated():
    def same(q: str, k: int) -> list[Hit]:
        return [Hit(doc_id="d", chunk_no=i % 3, content=q) for i in range(k)]

    res = agentic_loop(
        same,
        Scripted([Decision(False, ["more"]), Decision(True)]),
        "вопрос",
        Budget(max_rounds=5, max_searches=5, max_evidence=2, k=5),
    )
    assert [(h.doc_id, h.chunk_no) for h in res.evidence] == [("d", 0), ("d", 1)]
    assert res.partial and res.stop == "max_evidence"


def test_enough_is_not_partial():
    res = agentic_loop(Corpus(), Scripted([Decision(True)]), "вопрос", Budget())
    assert not res.partial and res.stop == "enough" and res.rounds == 1 and res.searches == 1


def test_coverage_planner_searches_for_what_is_missing():
    ev = [Hit(doc_id="a", chunk_no=0, content="Команда Payments владеет сервисом биллинга.")]
    d = CoveragePlanner().plan("Кто руководит командой Payments?", ev)
    assert not d.enough and d.queries == ["руководит"]
    assert CoveragePlanner().plan("Кто владеет биллингом?", ev).enough


def test_planner_json_is_untrusted():
    assert parse_decision('```json\n{"enough": false, "queries": ["a", 5, " ", "b"]}\n```') == Decision(
        False, ["a", "b"]
    )
    for bad in ("no json", '{"enough": "yes"}', '{"enough": false, "queries": "a"}'):
        with pytest.raises(ValueError):
            parse_decision(bad)
