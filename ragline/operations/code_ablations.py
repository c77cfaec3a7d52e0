"""The ranking variants a code evaluation measures beside the defaults: each structural signal alone,
left out and added (:func:`ablations`, re-fused from the candidates' ranks by :func:`refuse`), and
the file rankings (:func:`file_variants`). Grids of the evaluation, not of the search: the runtime
path (query/retrieval) never reads them; they call its pure functions, so what they measure is
what a search with those weights would answer.
"""

from __future__ import annotations

from dataclasses import replace

from ragline.query.retrieval.file_rank import FileWeights
from ragline.query.retrieval.fusion import FusionPolicy
from ragline.query.retrieval.structure import Weights
from ragline.shared.sdk.contracts import Hit

#: the bonus sizes measured for each signal alone (RRF units)
GRID = (0.001, 0.002, 0.004, 0.008, 0.016)


def ablations(w: Weights, grid: tuple[float, ...] = GRID) -> dict[str, Weights]:
    """The variants measured: no structure, the configured weights, each configured signal left out,
    each signal that is off added to them, and each signal alone at every size of ``grid`` (the
    named files' RRF weight at 62.5 times it)."""
    out = {"none": Weights(), "configured": w}
    configured = [k for k, v in w.as_dict().items() if v]
    if len(configured) > 1:
        for f in configured:
            out[f"configured but {f}"] = replace(w, **{f: 0.0})
    for f in Weights.__dataclass_fields__:  # each signal that is off, added to the configured ones
        if f not in configured:
            size = grid[len(grid) // 2]
            size = size * 62.5 if f == "named" else size
            out[f"configured plus {f}={size:g}"] = replace(w, **{f: size})
    for f in Weights.__dataclass_fields__:
        for v in grid:
            size = v * 62.5 if f == "named" else v
            out[f"only {f}={size:g}"] = Weights(**{f: size})
    return out


def refuse(hits: list[Hit], w: Weights, policy: FusionPolicy) -> list[Hit]:
    """Candidates of a structural search with their fused score recomputed from their ranks (vector,
    lexical, named files) with the RRF terms of ``policy`` (its ``vector_rrf_weight`` and
    ``lexical_weight``, ``w.named`` for the named files), sorted; a chunk only a zero-weight list
    found is dropped. For measuring, with :func:`rescore`; prefer bonus and test penalty are kept."""
    out = []
    for pos, h in enumerate(hits):
        parts = [
            (policy.vector_rrf_weight, h.vector_rank),
            (policy.lexical_weight, h.lexical_rank),
            (w.named, h.named_rank),
        ]
        if not any(weight and rank for weight, rank in parts):
            continue
        fused = round(sum(policy.rank_term(weight, rank) for weight, rank in parts if rank), 8)
        score = round(fused + h.prefer_bonus - h.test_penalty, 8)
        out.append((score, pos, h.model_copy(update={"score": score, "fused_score": fused})))
    out.sort(key=lambda t: (-t[0], t[1]))
    return [h for _, _, h in out]


#: the frame bonus sizes measured alone (units of the best hit's score)
FILE_GRID = (0.25, 0.5, 1.0)
#: the chunk weights measured alone (``decay``; the first ``depth`` chunks of a file count)
DECAYS = (0.25, 0.5, 0.75)


def file_variants(configured: FileWeights, depth: int = 3) -> dict[str, FileWeights]:
    """The file rankings an evaluation measures: ``none`` (the first-hit order), ``configured``, each
    chunk decay alone, the traceback frames' bonus alone at every size of :data:`FILE_GRID`, both
    together at the middle sizes, and the configured ones with each floor slack."""
    out = {"none": FileWeights(), "configured": configured}
    for d in DECAYS:
        out[f"only decay={d:g}"] = FileWeights(decay=d, depth=depth)
    for v in FILE_GRID:
        out[f"only frame={v:g}"] = FileWeights(frame=v)
    out["all"] = FileWeights(DECAYS[0], depth, FILE_GRID[len(FILE_GRID) // 2])
    for slack in (0, 1, 2):  # where the single lists' files are floored: within m·n + slack
        out[f"configured, floor slack {slack}"] = replace(configured, floor_slack=slack)
    return out
