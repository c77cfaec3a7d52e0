"""Reciprocal rank fusion: pure functions over ranked id lists."""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def rrf(
    rankings: dict[str, Sequence[Hashable]], k: int = 60, weights: dict[str, float] | None = None
) -> list[tuple[Hashable, float]]:
    """Fuse ranked lists: score(d) = Σ w_r / (k + rank_r(d)), ranks starting at 1.

    Ties are broken by the best single rank, then by first appearance, so the order is stable.
    """
    weights = weights or {}
    scores: dict[Hashable, float] = {}
    best: dict[Hashable, int] = {}
    first: dict[Hashable, int] = {}
    seen = 0
    for name, ranked in rankings.items():
        w = weights.get(name, 1.0)
        for rank, item in enumerate(ranked, start=1):
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
            best[item] = min(best.get(item, rank), rank)
            if item not in first:
                first[item] = seen
                seen += 1
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], first[kv[0]]))
