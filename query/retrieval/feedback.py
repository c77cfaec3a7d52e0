"""Pseudo-relevance feedback: a second retrieval pass steered by the first pass's best hits (pure).

No language model is asked; the first pass's top ``m`` fused hits are taken as relevant.

* **dense** (Rocchio): the question's vector moved toward the mean of those hits' vectors,
  ``alpha · q + beta · mean(d)``, searched again. Passages are written like passages and questions
  like questions; the mean of a few good passages can sit nearer the other good passages than the
  question does.
* **lexical**: the terms those hits share that the question lacks (their lexemes as Postgres'
  ``russian`` configuration wrote them, so no stop word and no inflection), OR-ed beside the
  question's own terms and ranked below them, so a passage wording its answer differently from the
  question can still match.

Whether it pays is a measurement (docs/evaluation.md, "Retrieval quality"); the settings are
``RAGLINE_PRF_MODE`` and ``RAGLINE_PRF_*``. The SQL is in :mod:`ragline.query.retrieval.sql`, the statements run by :func:`ragline.query.retrieval.retrievers.feedback_pass`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence

import numpy as np

#: shorter lexemes (units, initials, stray letters) say nothing about a topic
MIN_TERM_CHARS = 3


def feedback_keys(fused: Sequence[tuple[Hashable, float]], m: int) -> list[Hashable]:
    """The keys of the first ``m`` fused hits, best first."""
    return [key for key, _ in fused[: max(m, 0)]]


def rocchio(query: np.ndarray, feedback: Sequence[np.ndarray], alpha: float, beta: float) -> np.ndarray:
    """``alpha · q + beta · mean(feedback)``, scaled to unit length (the vectors are compared by
    cosine distance, so only the direction matters; unit length keeps the distances comparable
    with the first pass's). No feedback, or ``beta`` 0: the question's own direction."""
    q = np.asarray(query, dtype=np.float32)
    if not len(feedback) or beta == 0:
        moved = alpha * q
    else:
        mean = np.mean(np.stack([np.asarray(v, dtype=np.float32) for v in feedback]), axis=0)
        moved = alpha * q + beta * mean
    norm = float(np.linalg.norm(moved))
    if norm == 0.0:  # alpha 0 and no feedback, or vectors that cancel: nothing to steer by
        return q
    return (moved / norm).astype(np.float32)


def expansion_terms(
    query_lexemes: Iterable[str],
    feedback: Sequence[Mapping[str, int]],
    n_terms: int,
    min_docs: int = 2,
) -> list[str]:
    """At most ``n_terms`` lexemes of the feedback hits that the question does not hold.

    ``feedback``: each hit's lexemes with their number of occurrences, best hit first. A term
    must occur in at least ``min_docs`` of the hits (all of them when there are fewer): a word
    of one passage is that passage's topic, a word the best hits share is the question's. Ranked
    by the number of hits holding it, then its occurrences, then first appearance (stable)."""
    if n_terms <= 0 or not feedback:
        return []
    skip = set(query_lexemes)
    need = min(max(min_docs, 1), len(feedback))
    docs: dict[str, int] = {}
    occurrences: dict[str, int] = {}
    first: dict[str, int] = {}
    for tf in feedback:
        for lexeme, count in tf.items():
            if lexeme in skip or len(lexeme) < MIN_TERM_CHARS or lexeme.isdigit():
                continue
            first.setdefault(lexeme, len(first))
            docs[lexeme] = docs.get(lexeme, 0) + 1
            occurrences[lexeme] = occurrences.get(lexeme, 0) + max(int(count), 1)
    chosen = [t for t in first if docs[t] >= need]
    chosen.sort(key=lambda t: (-docs[t], -occurrences[t], first[t]))
    return chosen[:n_terms]


def tsquery_literal(terms: Iterable[str]) -> str:
    """A ``tsquery`` literal OR-ing ``terms`` as lexemes (quoted: no parsing, no stemming again);
    '' for none."""
    return " | ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms)
