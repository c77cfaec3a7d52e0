"""Fusion of ranked lists: reciprocal rank fusion and a convex combination of normalised scores.

:class:`FusionPolicy` is the one home of how lists become one: built from the settings, it is what
hybrid retrieval, the named-files list of code retrieval, multi-query and the evaluation sweeps
call, so a sweep can never measure a fusion the product no longer runs. Below it, pure functions
over ``(id, score)`` lists. RRF sees only ranks, so a weak list can only be
switched down, not trusted where it is sure; a convex combination of normalised scores keeps how
far ahead a hit is in each list (a BM25 score far above the rest, a distance far below), which is
what the dev sets reward once the lexical list is real BM25 (docs/evaluation.md, "Retrieval quality").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from ragline.query.retrieval.language import PASSAGES, lexical_weight

if TYPE_CHECKING:
    from ragline.shared.config.settings import Settings

Normalization = Literal["minmax", "zscore", "dbsf"]
Method = Literal["rrf", "convex"]


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
    span = hi - lo
    # the clip as two comparisons: a value already in [0, 1] (every min-max value) skips the calls
    return [v if 0.0 <= v <= 1.0 else min(1.0, max(0.0, v)) for v in [(s - lo) / span for s in scores]]


def convex(
    lists: dict[str, Sequence[tuple[Hashable, float]]],
    weights: dict[str, float],
    how: Normalization = "minmax",
) -> list[tuple[Hashable, float]]:
    """Fuse scored lists: score(d) = Σ w_r · norm_r(d), scores higher-is-better.

    A hit missing from a list ranked below everything the list returned: it gets the bottom of
    the scale (0; under ``zscore`` the list's lowest score). Ties keep the first appearance (lists in the order given,
    each best first), so the order is stable."""
    first: dict[Hashable, int] = {}
    for ranked in lists.values():
        for item, _ in ranked:
            if item not in first:
                first[item] = len(first)
    fused = dict.fromkeys(first, 0.0)
    for name, ranked in lists.items():
        w = weights.get(name, 1.0)
        if not ranked and math.isfinite(w):
            continue  # it would add w · 0 = ±0 to every sum, which changes none
        normed = normalize([s for _, s in ranked], how)
        floor = min(normed) if how == "zscore" and normed else 0.0
        present = {item: n for (item, _), n in zip(ranked, normed, strict=True)}
        for item in first:
            fused[item] += w * present.get(item, floor)
    # items are unique and ``first`` is their order of appearance, so a stable sort by score alone
    # keeps the first appearance among equal scores
    return sorted(fused.items(), key=lambda kv: -kv[1])


def hybrid_inputs(
    vector: Sequence[dict], lexical: Sequence[dict]
) -> tuple[list[tuple[Hashable, float]], list[tuple[Hashable, float]], list[str]]:
    """Candidate rows (``doc_id``, ``chunk_no``, ``distance`` or ``rank``, ``content``) as
    :meth:`FusionPolicy.hybrid` reads them: vector similarity ``1 - distance``, the lexical score,
    and the texts of the top vector hits for the script check. Retrieval and the sweeps both go
    through here, so they fuse the same numbers."""
    return (
        [((row["doc_id"], row["chunk_no"]), 1.0 - float(row["distance"])) for row in vector],
        [((row["doc_id"], row["chunk_no"]), float(row["rank"])) for row in lexical],
        [row["content"] for row in vector[:PASSAGES]],
    )


@dataclass(frozen=True)
class FusionPolicy:
    """How the vector and lexical lists of one search become one ranking, and the RRF unit every
    other list (named files, query variants) is added in.

    ``method`` "rrf" fuses by rank (``vector_weight`` / ``lexical_weight`` over ``rrf_k + rank``);
    "convex" combines normalised scores (``convex_lexical`` is the lexical share) and divides by
    ``rrf_k + 1``, the best score one RRF list can give, so bonuses and penalties tuned in RRF units
    keep their scale. ``cross_script_weight`` lowers the lexical weight of a question written in
    another script than the passages (:func:`ragline.query.retrieval.language.lexical_weight`) the same way
    in both methods; ``None`` turns that check off.

    ``vector_share`` is the share of the searched scope that has vectors (1 once every row is
    embedded; :meth:`covering`). While code is stored before its vectors, the vector list ranks only
    the rows embedded so far (the fill's first rows: prose, then the shortest source chunks), so its rank 1 is
    the best of a small sample, not of the scope: at full weight that sample would outrank every
    row the lexical list found better, and a hybrid search over a 2 % embedded repository would be
    a search of those 2 %. Its weight (RRF and convex alike) is scaled by the share, so hybrid moves
    from lexical to full hybrid as the fill progresses."""

    method: Method = "convex"
    rrf_k: int = 60
    vector_weight: float = 1.0
    lexical_weight: float = 0.0175
    cross_script_weight: float | None = 0.0
    convex_lexical: float = 0.3
    normalization: Normalization = "minmax"
    vector_share: float = 1.0

    @classmethod
    def from_settings(cls, settings: Settings, code: bool = False) -> FusionPolicy:
        """:data:`PROSE`, or :data:`CODE` for code retrieval, with the method the settings choose
        (``fusion.method``, ``fusion.method_code``)."""
        if code:
            return replace(CODE, method=settings.fusion.method_code)
        return replace(PROSE, method=settings.fusion.method)

    def covering(self, share: float) -> FusionPolicy:
        """This policy for a scope of which ``share`` (0..1) has vectors (``vector_share``)."""
        share = min(1.0, max(0.0, share))
        return self if share == self.vector_share else replace(self, vector_share=share)

    @property
    def vector_rrf_weight(self) -> float:
        """The vector list's RRF weight, scaled by the share of the scope it could see."""
        return self.vector_weight * self.vector_share

    def lexical_weight_for(self, query: str, passages: Sequence[str]) -> float:
        """The lexical list's RRF weight for this question (the script check, when it is on)."""
        if self.cross_script_weight is None:
            return self.lexical_weight
        return lexical_weight(query, passages, self.lexical_weight, self.cross_script_weight)

    def hybrid(
        self,
        query: str,
        vector: Sequence[tuple[Hashable, float]],
        lexical: Sequence[tuple[Hashable, float]],
        passages: Sequence[str] = (),
    ) -> list[tuple[Hashable, float]]:
        """The two lists of one search fused, best first, scores in RRF units (pure).

        ``vector``: ``(key, similarity)`` best first; ``lexical``: ``(key, score)`` best first;
        ``passages``: the texts of the top vector hits, which the script check reads."""
        w_lex = self.lexical_weight_for(query, passages if lexical else [])
        if self.method == "convex":
            scale = w_lex / self.lexical_weight if self.lexical_weight > 0 else 1.0
            fused = convex(
                {"vector": vector, "lexical": lexical},
                weights={
                    "vector": (1.0 - self.convex_lexical) * self.vector_share,
                    "lexical": self.convex_lexical * scale,
                },
                how=self.normalization,
            )
            return [(key, score / (self.rrf_k + 1)) for key, score in fused]
        return rrf(
            {"vector": [key for key, _ in vector], "lexical": [key for key, _ in lexical]},
            k=self.rrf_k,
            weights={"vector": self.vector_rrf_weight, "lexical": w_lex},
        )

    def rank_term(self, weight: float, rank: int) -> float:
        """What a list of ``weight`` adds for a hit at ``rank`` (from 1): one RRF term."""
        return weight / (self.rrf_k + rank)

    def by_rank(
        self, rankings: dict[str, Sequence[Hashable]], weights: dict[str, float] | None = None
    ) -> list[tuple[Hashable, float]]:
        """Lists whose scores are not comparable (query variants, each already fused) fused by rank
        with this policy's ``rrf_k``."""
        return rrf(rankings, k=self.rrf_k, weights=weights)


#: how a prose question's two lists are fused (0.2; the weights were settings until 0.1): a convex
#: combination of min-max normalised scores with the lexical list's share 0.3, in RRF units of
#: k = 60; as RRF, vector 1 : lexical 0.0175; a question in another script than its passages gets no
#: lexical weight. Chosen on tydi-ru-dev and xquad-ru dev (docs/evaluation.md, "Retrieval quality");
#: an evaluation measures others with ``dataclasses.replace(PROSE, ...)`` (``ragline eval --sweep-rrf``)
PROSE = FusionPolicy()
#: code retrieval's: RRF (the structural bonuses are in RRF units) with the lexical list at 0.1, where
#: identifiers make it a strong partner; chosen leaving one repository of swe-loc-dev out
#: (docs/evaluation.md, "Each list's first files keep a place")
CODE = FusionPolicy(method="rrf", lexical_weight=0.1)
