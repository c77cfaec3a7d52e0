"""The fusion of one search: which :class:`~ragline.query.retrieval.fusion.FusionPolicy` it runs
(code retrieval or prose, :func:`fusion_policy`) and the hits its vector and lexical rows become
(:func:`fuse`). The policy object and the list fusion it applies are
:mod:`ragline.query.retrieval.fusion`'s; this module decides which policy a search gets.
"""

from __future__ import annotations

from collections.abc import Iterable

from ragline.query.retrieval import sql, structure
from ragline.query.retrieval.fusion import FusionPolicy, hybrid_inputs
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import Hit


def code_retrieval(query: str, settings: Settings, rows: Iterable[dict] = ()) -> bool:
    """Whether a search is code retrieval: the question names a file or an identifier, or a
    candidate comes from a code layer or points at code (``related_code``). Such a search fuses
    with ``fusion_code`` and ``rrf_weight_lexical_code``: its structural bonuses were tuned in RRF
    units, and identifiers make the lexical list a strong partner there, where on prose it is weak."""
    named = structure.named(query)
    if named.files or named.identifiers:
        return True
    code_layers = settings.code.layers
    return any(
        row.get("layer") in code_layers or sql.metadata(row.get("metadata")).get("related_code")
        for row in rows
    )


def fusion_policy(
    query: str, settings: Settings, rows: Iterable[dict] = (), prose: FusionPolicy | None = None
) -> FusionPolicy:
    """The fusion of this search: the code policy for code retrieval (:func:`code_retrieval`), else
    the prose one (``prose``: another one, which an evaluation sweep measures). Code retrieval is
    decided once, and not at all when both policies agree."""
    prose = prose or FusionPolicy.from_settings(settings)
    code = FusionPolicy.from_settings(settings, code=True)
    if code == prose:
        return prose
    return code if code_retrieval(query, settings, rows) else prose


def fused_keys(
    vector: list[dict],
    lexical: list[dict],
    settings: Settings,
    query: str = "",
    vector_share: float = 1.0,
    prose: FusionPolicy | None = None,
) -> list[tuple[tuple[str, int], float]]:
    """The candidates' keys, best first, with their fused score in RRF units (pure): the rows
    (:func:`ragline.query.retrieval.fusion.hybrid_inputs`) fused by this search's :func:`fusion_policy`, whose
    vector list saw ``vector_share`` of the scope (:meth:`FusionPolicy.covering`)."""
    policy = fusion_policy(query, settings, [*vector, *lexical], prose).covering(vector_share)
    return policy.hybrid(query, *hybrid_inputs(vector, lexical))  # type: ignore[return-value]


def fuse(
    vector: list[dict],
    lexical: list[dict],
    settings: Settings,
    limit: int,
    query: str = "",
    vector_share: float = 1.0,
) -> list[Hit]:
    """The two lists fused by this search's policy (:func:`fused_keys`), plus
    prefer bonus, minus test penalty; pure.

    The lexical weight depends on the question (``query``): one written in another script than the
    passages the vector list found (English over Russian) and holding no number or identifier gets
    ``rrf_weight_lexical_cross_script``, because its words can only match stray tokens of its own
    script there (:mod:`ragline.query.retrieval.language`).

    Scores are computed on the rows; only the ``limit`` kept become :class:`Hit` models: a question
    has many more candidates than hits, and a model per candidate would dominate the task's own time."""
    rows: dict[tuple[str, int], dict] = {}
    for row in vector:
        rows.setdefault((row["doc_id"], row["chunk_no"]), row)
    for row in lexical:
        rows.setdefault((row["doc_id"], row["chunk_no"]), row)
    fused = fused_keys(vector, lexical, settings, query, vector_share)
    scored = []
    for position, (key, score) in enumerate(fused):
        row = rows[key]
        scored.append((round(score + float(row["prefer_bonus"]) - float(row["test_penalty"]), 8), position))
    # a stable sort keeps RRF's own tie-breaking among equal final scores
    scored.sort(key=lambda t: -t[0])
    kept = scored[:limit]
    ranks = _list_ranks(vector, lexical, {fused[position][0] for _, position in kept})
    hits = []
    for final, position in kept:
        key, score = fused[position]
        hits.append(sql.hit(rows[key], score=final, fused_score=round(score, 8), **ranks[key]))
    return hits


def _list_ranks(
    vector: list[dict], lexical: list[dict], keys: set[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, float | int]]:
    """Each of ``keys``' rank and raw score in the lists that have it (a key a list repeats: its
    last place there), for the kept hits alone: the other candidates never become hits."""
    ranks: dict[tuple[str, int], dict[str, float | int]] = {key: {} for key in keys}
    for rank, row in enumerate(vector, start=1):
        found = ranks.get((row["doc_id"], row["chunk_no"]))
        if found is not None:
            found["vector_rank"] = rank
            found["vector_distance"] = float(row["distance"])
    for rank, row in enumerate(lexical, start=1):
        found = ranks.get((row["doc_id"], row["chunk_no"]))
        if found is not None:
            found["lexical_rank"] = rank
            found["lexical_score"] = float(row["rank"])
    return ranks
