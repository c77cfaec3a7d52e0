"""Query pool: retrieve, fuse, rerank, answer, in two subpackages and the pool's entry points above them.

* ``ragline.query.retrieval``: what finds the chunks a question needs: the statements
  (``sql``), the transaction they run in (``transaction``), the retrievers (``retrievers``), their
  fusion (``fusion``), where a search's order is decided (``ranking``: its ``RankingPolicy``), the
  orchestrator (``search``), filters, structural and file ranking, expansion, the reranker, the
  query embedding cache and the row-level security check of the pool's start-up. It never calls a
  chat model and imports neither ``plan`` nor ``answer``.
* ``ragline.query.answer``: what turns hits into an answer: the question's run through the
  answer stages (``run``), context assembly, prompts, the extractive and chat generators behind
  one interface (``generate``), grounding, citations, sanitising, streaming, the user-facing
  texts and the agentic loop. It reads an ask's plan and evidence and may import ``retrieval``.
* ``plan``: what an ask searches for, decided once before the first search: the query transforms
  and the complexity router (they may ask the chat model), the frozen ``QueryPlan`` and the frozen
  ``Evidence`` its execution hands the answer side. It imports ``retrieval``'s policies and never
  the answer side.
* at the top, what knows both sides or neither: ``tasks`` (the Celery tasks; their names are a
  wire contract, ``ragline.shared.sdk.names``), ``service`` (the search and ask paths stage by
  stage: it builds an ask's plan, executes it on one connection and runs the answer stages over
  the evidence, so it sits above them all), ``schemas`` (the contract's JSON
  Schema export, the CLI's), ``admission`` (per-tenant admission, asked by the tasks before any
  other work), and two modules both sides read: ``deadline`` (the question's time budget, which
  every stage checks) and ``question`` (what a question asks, read from its words).

``pyproject.toml``'s import contracts state it: tasks > service > answer > plan > retrieval >
deadline | question. The modules were once all in this folder; their old module names were
removed in 0.2 (docs/upgrading.md lists each with its new one).
"""
