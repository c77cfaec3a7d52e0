"""Fusion of ranked lists: reciprocal rank fusion and a convex combination of normalised scores.

Pure functions over ``(id, score)`` lists. RRF sees only ranks, so a weak list can only be
switched down, not trusted where it is sure; a convex combination of normalised scores keeps how
far ahead a hit is in each list (a BM25 score far above the rest, a distance far below), which is
what the dev sets reward once the lexical list is real BM25 (README "Retrieval quality").
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Sequence
from typing import Literal

Normalization = Literal["minmax", "zscore", "dbsf"]


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


def normalize(scores: Sequence[float], how: Normalization = "minmax") -> list[float]:
    """Scores (higher is better) mapped to a common scale.

    ``minmax``: the list's best 1, its worst 0. ``zscore``: standard scores. ``dbsf``
    (distribution-based): min-max over mean ± 3 standard deviations, clipped to [0, 1], so one
    outlier does not squash the rest. A list whose scores are all equal maps to 1 (each hit is
    as good as the best)."""
    if not scores:
        return []
    if how == "zscore":
        if len(scores) < 2:
            return [0.0 for _ in scores]
        mean, sd = statistics.fmean(scores), statistics.pstdev(scores)
        return [(s - mean) / sd if sd > 0 else 0.0 for s in scores]
    if how == "dbsf":
        mean, sd = statistics.fmean(scores), statistics.pstdev(scores)
        lo, hi = mean - 3 * sd, mean + 3 * sd
    elif how == "minmax":
        lo, hi = min(scores), max(scores)
    else:
        raise ValueError(f"unknown normalization {how!r}")
    if hi <= lo:
        return [1.0 for _ in scores]
    return [min(1.0, max(0.0, (s - lo) / (hi - lo))) for s in scores]


def convex(
    lists: dict[str, Sequence[tuple[Hashable, float]]],
    weights: dict[str, float],
    how: Normalization = "minmax",
) -> list[tuple[Hashable, float]]:
    """Fuse scored lists: score(d) = Σ w_r · norm_r(d), scores higher-is-better.

    A hit missing from a list ranked below everything the list returned: it gets the bottom of
    the scale (0; under ``zscore`` the list's lowest score). Ties keep the first appearance (lists in the order given,
    each best first), so the order is stable."""
    fused: dict[Hashable, float] = {}
    first: dict[Hashable, int] = {}
    for ranked in lists.values():
        for item, _ in ranked:
            first.setdefault(item, len(first))
    for name, ranked in lists.items():
        w = weights.get(name, 1.0)
        normed = normalize([s for _, s in ranked], how)
        floor = min(normed) if how == "zscore" and normed else 0.0
        present = {item: n for (item, _), n in zip(ranked, normed, strict=True)}
        for item in first:
            fused[item] = fused.get(item, 0.0) + w * present.get(item, floor)
    return sorted(fused.items(), key=lambda kv: (-kv[1], first[kv[0]]))
