"""Query pool: retrieve, fuse, rerank, answer, in two subpackages and the pool's entry points above them.

* ``ragline.query.retrieval``: what finds the chunks a question needs: the SQL retrievers, their
  fusion, filters, structural and file ranking, pseudo-relevance feedback, expansion, the reranker
  and the query embedding cache. It never calls a chat model and never imports ``answer``.
* ``ragline.query.answer``: what turns hits into an answer: context assembly, prompts, the
  extractive and chat generators, grounding, citations, sanitising, streaming, the user-facing
  texts, the query transforms and the agentic loop (the last two ask the chat generator, so they
  are the answer side's even though they run before a search). It may import ``retrieval``.
* at the top, what runs a question and knows both sides: ``tasks`` (the Celery tasks, whose names
  are a wire contract), ``service`` (the search and ask paths stage by stage), ``schemas``,
  ``deadline`` (the question's time budget, which every stage of both sides checks) and
  ``admission`` (per-tenant admission, asked before any other work).

``pyproject.toml``'s import contracts keep ``retrieval`` below ``answer`` and both below the top.
The modules were once all in this folder; their old names (``ragline.query.extractive``) still
import, as the module of the new name with a DeprecationWarning (:data:`MOVED`, served by the finder
of ``ragline.shared``).
"""

from __future__ import annotations

_RETRIEVAL = (
    "cache",
    "expand",
    "feedback",
    "file_rank",
    "filters",
    "fusion",
    "language",
    "rerank",
    "structure",
    "terms",
    "vector_index",
)
_ANSWER = (
    "agentic",
    "citations",
    "code_answer",
    "context",
    "extractive",
    "generate",
    "grounding",
    "prompt",
    "sanitize",
    "stream",
    "texts",
    "transforms",
)

#: old module name -> its home now
MOVED: dict[str, str] = {
    **{f"ragline.query.{name}": f"ragline.query.retrieval.{name}" for name in _RETRIEVAL},
    **{f"ragline.query.{name}": f"ragline.query.answer.{name}" for name in _ANSWER},
    "ragline.query.retrieve": "ragline.query.retrieval.search",
}
