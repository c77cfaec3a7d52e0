"""Query transforms behind settings: history rewrite, multi-query, HyDE.

Each one is an extra generator call, so each is off by default and needs a chat generator
(``anthropic``, ``openai`` or ``ollama``); with the offline ``extractive`` generator they are
skipped. A failed transform keeps the original question and marks the answer degraded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ragline.query.answer.prompt import HYDE_PROMPT, MULTI_QUERY_PROMPT, REWRITE_PROMPT, render_history, x
from ragline.query.answer.run import QuestionRun
from ragline.shared.sdk.contracts import AskRequest
from ragline.shared.worker import providers
from ragline.shared.worker.text import embedding_form

log = logging.getLogger(__name__)


@dataclass
class QueryPlan:
    queries: list[str]  # the first one is the (possibly rewritten) question
    hyde_vec: np.ndarray | None = None
    hyde: bool = False
    notes: list[str] = field(default_factory=list)


def parse_variants(text: str, n: int, original: str) -> list[str]:
    """One variant per line; numbering and bullets stripped; duplicates of the question dropped."""
    out: list[str] = []
    for line in text.splitlines():
        v = line.strip().lstrip("-*•0123456789.) ").strip()
        if v and v.lower() != original.strip().lower() and v not in out:
            out.append(v[:500])
    return out[:n]


def plan_queries(req: AskRequest, run: QuestionRun) -> QueryPlan:
    """The queries to search (the question, rewritten from the history, and its variants) and the
    HyDE vector, from the run's chat model; a failed transform is one of the run's ``reasons``."""
    settings = run.settings
    reasons = run.reasons
    plan = QueryPlan(queries=[req.query])
    wants = (
        (req.history and settings.transform.rewrite)
        or settings.transform.multi_query
        or settings.transform.hyde
    )
    if not wants:
        return plan
    generator = run.chat_model("transform")
    if generator is None:
        return plan
    question = req.query
    if req.history and settings.transform.rewrite:
        try:
            g = generator.generate(
                REWRITE_PROMPT,
                [{"role": "user", "content": render_history(req.history, question)}],
                max_tokens=200,
            )
            rewritten = g.text.strip().splitlines()[0].strip() if g.text.strip() else ""
            if rewritten:
                question = rewritten[:4000]
        except Exception as exc:
            log.warning("query rewrite failed: %s", type(exc).__name__)
            reasons.append(f"rewrite: {type(exc).__name__}")
    plan.queries = [question]
    if settings.transform.multi_query:
        try:
            g = generator.generate(
                MULTI_QUERY_PROMPT.format(n=settings.transform.multi_query),
                [{"role": "user", "content": f"<question>{x(question)}</question>"}],
                max_tokens=400,
            )
            plan.queries += parse_variants(g.text, settings.transform.multi_query, question)
        except Exception as exc:
            log.warning("multi-query failed: %s", type(exc).__name__)
            reasons.append(f"multi_query: {type(exc).__name__}")
    if settings.transform.hyde:
        try:
            g = generator.generate(
                HYDE_PROMPT,
                [{"role": "user", "content": f"<question>{x(question)}</question>"}],
                max_tokens=300,
            )
            if g.text.strip():
                vec = providers.get_embedder().embed_documents([embedding_form(g.text.strip())])[0]
                plan.hyde_vec = np.asarray(vec, dtype=np.float32)
                plan.hyde = True
        except Exception as exc:
            log.warning("HyDE failed: %s", type(exc).__name__)
            reasons.append(f"hyde: {type(exc).__name__}")
    return plan
