"""Agentic retrieval: search, check whether the evidence is enough, search again, within a
budget of rounds, searches and evidence chunks. Repeated queries count as going in circles. When
the budget runs out the answer is built from what was found and marked ``partial``.

The loop is a pure function over two interfaces, so its budget is tested without any provider:
``search(query, k) -> hits`` and a planner deciding ``enough`` / next ``queries``; the ask path
that wires it to retrieval and the generator is ``service.agentic_ask``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ragline.query.answer.prompt import PLAN_PROMPT, render_documents, x
from ragline.query.plan import WORD, normalized
from ragline.shared.sdk.contracts import Hit
from ragline.shared.worker.text import stem, stems

log = logging.getLogger(__name__)

Searcher = Callable[[str, int], list[Hit]]


@dataclass(frozen=True)
class Budget:
    """The loop's budget (:data:`BUDGET`); ``k``: the hits each search brings, the caller's."""

    max_rounds: int = 3
    max_searches: int = 6
    max_evidence: int = 12
    k: int = 5


#: the ask path's budget, ``k`` set per request: the algorithm's, not a deployment's (the question's
#: deadline, a setting, is what bounds its time). Read at each ask; an evaluation passes
#: :func:`agentic_loop` another budget, or sets this one for its run
BUDGET = Budget()


@dataclass
class Decision:
    enough: bool
    queries: list[str] = field(default_factory=list)


class Planner(Protocol):
    def plan(self, question: str, evidence: list[Hit]) -> Decision: ...


@dataclass
class LoopResult:
    evidence: list[Hit] = field(default_factory=list)
    rounds: int = 0
    searches: int = 0
    asked: list[str] = field(default_factory=list)
    partial: bool = False
    stop: str = ""


def agentic_loop(search: Searcher, planner: Planner, question: str, budget: Budget) -> LoopResult:
    res = LoopResult()
    seen: set[tuple[str, int]] = set()
    asked: set[str] = set()
    queries = [question]
    while True:
        res.rounds += 1
        for q in queries:
            if normalized(q) in asked or res.searches >= budget.max_searches:
                continue  # a repeated query is the usual symptom of going in circles
            asked.add(normalized(q))
            res.asked.append(q)
            res.searches += 1
            for h in search(q, budget.k):
                key = (h.doc_id, h.chunk_no)
                if key not in seen and len(res.evidence) < budget.max_evidence:
                    seen.add(key)
                    res.evidence.append(h)
        decision = planner.plan(question, res.evidence)
        if decision.enough:
            res.stop = "enough"
            return res
        fresh = [q for q in decision.queries if normalized(q) not in asked]
        if res.rounds >= budget.max_rounds or res.searches >= budget.max_searches or not fresh:
            res.partial = True
            res.stop = (
                "max_rounds"
                if res.rounds >= budget.max_rounds
                else "max_searches"
                if res.searches >= budget.max_searches
                else "repeated_queries"
            )
            return res
        if len(res.evidence) >= budget.max_evidence:
            res.partial = True
            res.stop = "max_evidence"
            return res
        queries = fresh


# ------------------------------------------------------------------------------------- planners
def _stems(text: str) -> set[str]:
    return stems(text, min_len=4)


class CoveragePlanner:
    """Offline planner: enough when every content word of the question (stem of 5 letters, words of
    4+ letters) occurs in the evidence; otherwise search for the words still missing."""

    def plan(self, question: str, evidence: list[Hit]) -> Decision:
        found: set[str] = set()
        for h in evidence:
            found |= _stems(f"{h.heading} {h.content}")
        missing = [w for w in dict.fromkeys(WORD.findall(question.lower())) if stem(w) not in found]
        if not missing:
            return Decision(True)
        return Decision(False, [" ".join(missing)])


class LLMPlanner:
    """The sufficiency check as one generator call answering JSON."""

    def __init__(self, generator) -> None:
        self.generator = generator

    def plan(self, question: str, evidence: list[Hit]) -> Decision:
        content = f"{render_documents(evidence)}\n\n<question>{x(question)}</question>"
        g = self.generator.generate(PLAN_PROMPT, [{"role": "user", "content": content}], max_tokens=300)
        return parse_decision(g.text)


def parse_decision(text: str) -> Decision:
    """The planner's JSON (possibly inside prose or a code fence); untrusted, so checked field by field."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("planner answered without JSON")
    data = json.loads(text[start : end + 1])
    if not isinstance(data, dict) or not isinstance(data.get("enough"), bool):
        raise ValueError("planner JSON without a boolean 'enough'")
    queries = data.get("queries") or []
    if not isinstance(queries, list):
        raise ValueError("planner 'queries' is not a list")
    return Decision(data["enough"], [str(q)[:500] for q in queries if isinstance(q, str) and q.strip()][:3])
