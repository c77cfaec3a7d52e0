"""Parse and validate [N] citations in a generated answer."""

from __future__ import annotations

import re

_CITE = re.compile(r"\[(\d{1,3})\]")


def cited_numbers(answer: str) -> list[int]:
    seen: list[int] = []
    for m in _CITE.finditer(answer):
        n = int(m.group(1))
        if n not in seen:
            seen.append(n)
    return seen


def invalid_citations(answer: str, n_documents: int) -> list[int]:
    """Numbers cited that do not name a document in the prompt (1..n_documents)."""
    return [n for n in cited_numbers(answer) if not 1 <= n <= n_documents]
