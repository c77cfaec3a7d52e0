"""Answer generators. ``extractive`` (offline default) cites the best-matching sentences."""

from __future__ import annotations

import re

from ragline.query.prompt import NO_ANSWER
from ragline.shared.contracts import Hit
from ragline.shared.text import split_sentences

__all__ = ["NO_ANSWER", "extractive_answer"]

_WORD = re.compile(r"\w+", re.UNICODE)


def _stems(text: str) -> set[str]:
    # crude Russian-friendly stemming: compare the first 5 letters of words of 3+ letters
    return {w[:5] for w in _WORD.findall(text.lower()) if len(w) >= 3}


def extractive_answer(question: str, hits: list[Hit], max_sentences: int = 3) -> str:
    """Pick the sentences of the top chunks sharing most terms with the question, each cited [N]."""
    q = _stems(question)
    scored: list[tuple[float, int, int, str]] = []
    for n, h in enumerate(hits, start=1):
        for i, sent in enumerate(split_sentences(h.content)):
            overlap = len(q & _stems(sent))
            if overlap:
                # earlier documents (better ranked) win ties
                scored.append((overlap - 0.01 * n, n, i, sent.strip()))
    if not scored:
        return NO_ANSWER
    best = sorted(scored, key=lambda s: -s[0])[:max_sentences]
    best.sort(key=lambda s: (s[1], s[2]))
    return " ".join(f"{s[3]} [{s[1]}]" for s in best)
