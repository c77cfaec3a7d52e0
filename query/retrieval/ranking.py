"""Where a search's order is decided: its lists in, its hits (and the file list's leads) out; pure.

The retrieval (:mod:`ragline.query.retrieval.search`) runs the retrievers and hands their rows here.
The order comes from, in this sequence: the fusion of the vector and lexical lists by the search's
:class:`~ragline.query.retrieval.fusion.FusionPolicy` (code or prose, :mod:`ragline.query.retrieval.hybrid`);
for a code question, the chunks of the files it names as a third list and the structural re-score
(:mod:`ragline.query.retrieval.structure`), or the retrieval contract's lexicographic order; then the
top ``limit``. The file list a response carries (:mod:`ragline.query.retrieval.file_rank`, built in
``service.search`` after an optional rerank) keeps each single list's first files, whose rows
:func:`leads` hands over.
"""

from __future__ import annotations

from ragline.query.retrieval import file_rank, sql, structure
from ragline.query.retrieval.fusion import FusionPolicy
from ragline.query.retrieval.hybrid import fuse
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import Hit, SearchRequest


def order(
    req: SearchRequest,
    vector: list[dict],
    lexical: list[dict],
    named: list[dict],
    settings: Settings,
    limit: int,
    n: int,
    share: float,
) -> tuple[list[Hit], bool]:
    """The search's first ``limit`` hits from its lists (``named``: the rows of the files the
    question names; ``n``: each list's length; ``share``: the share of the scope the vector list
    saw), and whether the structural order applied."""
    if not (req.ordering == "contract" or named or structural(req, vector, lexical, settings)):
        return fuse(vector, lexical, settings, limit, req.query, share), False
    hits = fuse(vector, lexical, settings, n * 2, req.query, share)
    if named:
        hits = structure.with_named(
            hits,
            [sql.hit(r) for r in named],
            structure.WEIGHTS.named,
            FusionPolicy.from_settings(settings, code=True),  # a question naming files is code retrieval
        )
    return ranked_by_structure(req, hits, settings)[:limit], True


def leads(vector: list[dict], lexical: list[dict], settings: Settings) -> list[list[Hit]]:
    """The first row of each of the first files of both lists, which the file list keeps a place
    for (:mod:`ragline.query.retrieval.file_rank`); none unless both lists ran and the file ranking is on."""
    if not (vector and lexical and settings.code.file_rank):
        return []
    return [[sql.hit(r) for r in file_rank.lead_files(rows, file_rank.LEADS)] for rows in (vector, lexical)]


def structural(req: SearchRequest, vector: list[dict], lexical: list[dict], settings: Settings) -> bool:
    """Whether the structural re-score can change anything: it is on (the request, else the
    setting), and the question names a file or an identifier, a candidate carries ``related_code``
    or defines a name the question spells in words, or layers of different rank compete with a
    layer step. Otherwise the fused order stands and no
    candidate beyond the kept ones becomes a model."""
    if not structure_on(req, settings):
        return False
    named = structure.named(req.query)
    if named.files or named.identifiers:
        return True
    rows = [*vector, *lexical]
    if any(sql.metadata(r["metadata"]).get("related_code") for r in rows):
        return True
    if structure.WEIGHTS.spelled > 0 and spells_a_definition(req.query, rows):
        return True
    if not structure.WEIGHTS.layer_step > 0:  # no step: layers cannot reorder anything
        return False
    layer_ranks = settings.code.layer_ranks
    return len({structure.layer_rank(r["layer"], layer_ranks) for r in rows}) > 1


def spells_a_definition(question: str, rows: list[dict]) -> bool:
    """Whether a candidate defines a name the question spells in words (:func:`structure.spells`)."""
    words = structure.question_words(question)
    if not words:  # nothing is spelled without words
        return False
    return any(
        structure.spelled_definitions(
            words, [s for s in sql.metadata(r["metadata"]).get("symbols") or [] if isinstance(s, str)]
        )
        for r in rows
    )


def structure_on(req: SearchRequest, settings: Settings) -> bool:
    return settings.code.structure if req.structure is None else req.structure


def names_a_file(req: SearchRequest) -> bool:
    return bool(structure.named(req.query).files)


def ranked_by_structure(req: SearchRequest, hits: list[Hit], settings: Settings) -> list[Hit]:
    """The candidates re-scored by structure, or in the retrieval contract's order (pure)."""
    weights = structure.WEIGHTS
    if req.ordering == "contract":
        return structure.contract_order(hits, req.query, weights, settings)
    return structure.rescore(hits, req.query, weights, settings)
