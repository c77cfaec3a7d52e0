"""Where a search's order is decided: its lists in, its hits (and the file list's leads) out; pure.

A :class:`RankingPolicy` is built once per search from the settings and the question
(:meth:`RankingPolicy.of`): what the question names and the words it writes are read there, once,
and every step below reads them from the policy. The retrieval (:mod:`ragline.query.retrieval.search`)
runs the retrievers and hands their rows to :meth:`RankingPolicy.order`, which goes:

1. **lists**: the vector and the lexical rows (and, for a question naming files, those files'
   chunks: :attr:`RankingPolicy.reads_named_files`);
2. **fuse**: the two lists become one by the search's
   :class:`~ragline.query.retrieval.fusion.FusionPolicy`, the code one or the prose one, decided once
   (:meth:`RankingPolicy.fusion`), its vector weight scaled by the share of the scope it saw;
3. **additive signals**: the request's path preferences (the prefer bonus and the tests' penalty,
   :class:`PathPreferences`, from each row's path and layer); for a code question the
   named files as a third RRF list and the structural bonuses
   (:mod:`ragline.query.retrieval.structure`), or the retrieval contract's lexicographic order;
4. **top k**: the first ``limit``.

The file list a response carries (:mod:`ragline.query.retrieval.file_rank`, built in
``service.search`` after an optional rerank) fuses the hits' files with the lexical list's and keeps
each single list's first files, whose rows :meth:`RankingPolicy.leads` hands over. An evaluation measures other weights with
``dataclasses.replace`` on the policy (``prose``, ``code``, ``weights``), so it measures exactly
this path.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ragline.query.retrieval import file_rank, sql, structure
from ragline.query.retrieval.filters import Glob
from ragline.query.retrieval.fusion import FusionPolicy, hybrid_inputs
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import Hit, SearchRequest

#: added to the fused score of a hit matching the request's ``prefer_path_prefixes`` /
#: ``prefer_like_patterns``, in RRF units (one rank near the top is ~0.0003): it lifts a preferred
#: hit over a few ranks, not over the whole list (0.2; a setting until 0.1)
PREFER_BONUS = 0.005
#: subtracted from the fused score of a test file's hit when the request sets ``prefer_non_tests``
TEST_PENALTY = 0.005


@dataclass(frozen=True)
class PathPreferences:
    """The request's path preferences: a bonus for a row whose path starts with one of
    ``prefixes`` or matches one of ``globs`` (:class:`ragline.query.retrieval.filters.Glob`, the
    rule of ``filters``' globs, compiled once per search), a penalty for a row stored in
    ``tests_layer`` (None: the request does not ask for it). Ingestion decides which rows are tests
    (``ingest/layers.py``), so search never judges a path again."""

    prefixes: tuple[str, ...] = ()
    globs: tuple[str, ...] = ()
    tests_layer: str | None = None
    bonus: float = PREFER_BONUS
    penalty: float = TEST_PENALTY
    _compiled: tuple[Glob, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(Glob(g) for g in dict.fromkeys(self.globs)))

    @classmethod
    def of(cls, req: SearchRequest, settings: Settings) -> PathPreferences:
        """The preferences ``req`` states (empty patterns ignored), the tests layer the settings'."""
        return cls(
            prefixes=tuple(p for p in req.prefer_path_prefixes if p),
            globs=tuple(g for g in req.prefer_like_patterns if g),
            tests_layer=settings.code.tests_layer if req.prefer_non_tests else None,
        )

    def signals(self, row: Mapping) -> dict[str, float]:
        """A row's ``prefer_bonus`` and ``test_penalty`` (the :class:`Hit` fields), from its
        ``path`` and ``layer``."""
        path = row["path"]
        preferred = path is not None and (
            path.startswith(self.prefixes) or any(g.matches(path) for g in self._compiled)
        )
        test = self.tests_layer is not None and row["layer"] == self.tests_layer
        return {
            "prefer_bonus": self.bonus if preferred else 0.0,
            "test_penalty": self.penalty if test else 0.0,
        }


@dataclass(frozen=True)
class RankingPolicy:
    """How one search is ordered: the question as read once, the two fusions, the structural
    weights and the settings' switches. Built by :meth:`of` (a request) or :meth:`for_question`;
    frozen, so whatever carries it (the query plan, an evaluation) cannot change it under a search."""

    #: the question the lists were searched with
    question: str
    #: what it names (files, identifiers, modules): :func:`ragline.query.retrieval.structure.named`
    named: structure.Named
    #: the words it writes as words: :func:`ragline.query.retrieval.structure.question_words`
    words: tuple[str, ...]
    #: the fusion of a prose search and of code retrieval (:meth:`fusion` chooses)
    prose: FusionPolicy
    code: FusionPolicy
    #: the structural re-score is on (the request, else ``RAGLINE_CODE_STRUCTURE``)
    structural: bool
    #: the retrieval contract's lexicographic order (``ordering: "contract"``)
    contract: bool
    #: the structural bonuses and the named files' RRF weight
    weights: structure.Weights
    #: each layer's rank in the contract's order (:data:`ragline.query.retrieval.structure.LAYER_ORDER`)
    layer_ranks: Mapping[str, int]
    #: the layers a repository's code is stored in: a candidate there makes the search code retrieval
    code_layers: frozenset[str]
    #: ``RAGLINE_CODE_FILE_RANK``: the file list keeps each single list's first files
    file_rank: bool
    #: the request's path preferences (none for a bare question)
    paths: PathPreferences = PathPreferences()

    @classmethod
    def of(cls, req: SearchRequest, settings: Settings) -> RankingPolicy:
        """The policy of the search ``req`` asks for (its question, ``structure``, ``ordering`` and
        path preferences)."""
        policy = cls.for_question(
            req.query, settings, structural=req.structure, contract=req.ordering == "contract"
        )
        return replace(policy, paths=PathPreferences.of(req, settings))

    @classmethod
    def for_question(
        cls, question: str, settings: Settings, *, structural: bool | None = None, contract: bool = False
    ) -> RankingPolicy:
        """The policy of a search for ``question`` (``structural`` None: the setting's)."""
        c = settings.code
        return cls(
            question=question,
            named=structure.named(question),
            words=tuple(structure.question_words(question)),
            prose=FusionPolicy.from_settings(settings),
            code=FusionPolicy.from_settings(settings, code=True),
            structural=c.structure if structural is None else structural,
            contract=contract,
            weights=structure.WEIGHTS,
            layer_ranks=MappingProxyType(structure.layer_ranks(c)),
            code_layers=c.layers,
            file_rank=c.file_rank,
        )

    @property
    def names_code(self) -> bool:
        """The question names a file or an identifier."""
        return bool(self.named.files or self.named.identifiers)

    @property
    def reads_named_files(self) -> bool:
        """Whether the search reads the chunks of the files the question names (a third list)."""
        return self.structural and bool(self.named.files)

    def fusion(self, rows: Iterable[dict]) -> FusionPolicy:
        """The fusion of this search, decided once: the code policy for code retrieval (the question
        names a file or an identifier, or a candidate row comes from a code layer or points at code,
        ``related_code``), else the prose one. Code retrieval fuses differently because its
        structural bonuses are in RRF units and identifiers make the lexical list a strong partner
        there, where on prose it is weak. Not decided at all when both policies agree."""
        if self.code == self.prose:
            return self.prose
        if self.names_code:
            return self.code
        code = any(
            row.get("layer") in self.code_layers or sql.metadata(row.get("metadata")).get("related_code")
            for row in rows
        )
        return self.code if code else self.prose

    def hit(self, row: dict, **ranking: float | int | None) -> Hit:
        """The hit of a retrieved row, with its path preferences and ``ranking``'s fields."""
        return sql.hit(row, **self.paths.signals(row), **ranking)

    def fused_keys(
        self, vector: list[dict], lexical: list[dict], vector_share: float = 1.0
    ) -> list[tuple[tuple[str, int], float]]:
        """The candidates' keys, best first, with their fused score in RRF units (pure): the rows
        (:func:`ragline.query.retrieval.fusion.hybrid_inputs`) fused by :meth:`fusion`, whose vector
        list saw ``vector_share`` of the scope (:meth:`FusionPolicy.covering`)."""
        policy = self.fusion([*vector, *lexical]).covering(vector_share)
        return policy.hybrid(self.question, *hybrid_inputs(vector, lexical))  # type: ignore[return-value]

    def fuse(
        self, vector: list[dict], lexical: list[dict], limit: int, vector_share: float = 1.0
    ) -> list[Hit]:
        """The two lists fused (:meth:`fused_keys`), plus the prefer bonus, minus the tests' penalty;
        the first ``limit`` (pure).

        The lexical weight depends on the question: one written in another script than the passages
        the vector list found (English over Russian) and holding no number or identifier gets the
        policy's ``cross_script_weight``, because its words can only match stray tokens of its own
        script there (:mod:`ragline.query.retrieval.language`).

        Scores are computed on the rows; only the ``limit`` kept become :class:`Hit` models: a
        question has many more candidates than hits, and a model per candidate would dominate the
        task's own time."""
        rows: dict[tuple[str, int], dict] = {}
        for row in vector:
            rows.setdefault((row["doc_id"], row["chunk_no"]), row)
        for row in lexical:
            rows.setdefault((row["doc_id"], row["chunk_no"]), row)
        fused = self.fused_keys(vector, lexical, vector_share)
        scored = []
        for position, (key, score) in enumerate(fused):
            signals = self.paths.signals(rows[key])
            scored.append((round(score + signals["prefer_bonus"] - signals["test_penalty"], 8), position))
        # a stable sort keeps the fusion's own tie-breaking among equal final scores
        scored.sort(key=lambda t: -t[0])
        kept = scored[:limit]
        ranks = _list_ranks(vector, lexical, {fused[position][0] for _, position in kept})
        hits = []
        for final, position in kept:
            key, score = fused[position]
            hits.append(self.hit(rows[key], score=final, fused_score=round(score, 8), **ranks[key]))
        return hits

    def order(
        self,
        vector: list[dict],
        lexical: list[dict],
        named: list[dict],
        limit: int,
        n: int,
        share: float,
    ) -> tuple[list[Hit], bool]:
        """The search's first ``limit`` hits from its lists (``named``: the rows of the files the
        question names; ``n``: each list's length; ``share``: the share of the scope the vector list
        saw), and whether the structural order applied."""
        if not (self.contract or named or self.restructures(vector, lexical)):
            return self.fuse(vector, lexical, limit, share), False
        hits = self.fuse(vector, lexical, n * 2, share)
        if named:
            # a question naming files is code retrieval: the named list adds in the code fusion's RRF unit
            hits = structure.with_named(hits, [self.hit(r) for r in named], self.weights.named, self.code)
        return self.restructured(hits)[:limit], True

    def restructures(self, vector: list[dict], lexical: list[dict]) -> bool:
        """Whether the structural re-score can change anything: it is on, and the question names a
        file or an identifier, a candidate carries ``related_code`` or defines a name the question
        spells in words. Otherwise the fused order stands and no candidate beyond the kept ones
        becomes a model."""
        if not self.structural:
            return False
        if self.names_code:
            return True
        rows = [*vector, *lexical]
        if any(sql.metadata(r["metadata"]).get("related_code") for r in rows):
            return True
        return self.weights.spelled > 0 and self._spells_a_definition(rows)

    def _spells_a_definition(self, rows: list[dict]) -> bool:
        """Whether a candidate defines a name the question spells in words (:func:`structure.spells`)."""
        if not self.words:  # nothing is spelled without words
            return False
        return any(
            structure.spelled_definitions(
                self.words,
                [s for s in sql.metadata(r["metadata"]).get("symbols") or [] if isinstance(s, str)],
            )
            for r in rows
        )

    def restructured(self, hits: list[Hit]) -> list[Hit]:
        """The candidates re-scored by structure, or in the retrieval contract's order (pure)."""
        order = structure.contract_order if self.contract else structure.rescore
        return order(hits, self.named, self.words, self.weights, self.layer_ranks)

    def leads(self, vector: list[dict], lexical: list[dict], named: Sequence[dict] = ()) -> list[list[Hit]]:
        """The first row of each of the first files of both lists, which the file list keeps a place
        for and whose files' order it fuses with the hits' (:mod:`ragline.query.retrieval.file_rank`);
        none unless both lists ran and the file ranking is on. The lexical list is in the order a
        lexical search answers with (its rows re-scored by structure, with the files the question
        names: ``named``), the order a code search has while the repository's vectors are filled.
        None either when no candidate is code: a prose search lists no files (``file_rank``'s
        ``response_files``), and the lexical list's re-score is the costly part."""
        if not (vector and lexical and self.file_rank):
            return []
        if not any(r.get("layer") in self.code_layers for r in (*vector, *lexical, *named)):
            return []
        n = len(lexical)
        structured, _ = self.order([], lexical, list(named), n, n, 1.0)
        return [
            [self.hit(r) for r in file_rank.lead_files(vector, file_rank.LEADS)],
            file_rank.lead_files(structured, file_rank.LEADS),
        ]


#: the vector list's places that stand for the question's background similarity (:func:`background`):
#: past the first ten, which hold what the question is about when the scope has it
BACKGROUND_FROM = 10
#: the fewest background places a standardised similarity is computed from
BACKGROUND_MIN = 10


def background(vector: list[dict]) -> tuple[float, float] | None:
    """The mean and standard deviation of the question's similarity to the vector list's candidates
    past :data:`BACKGROUND_FROM`, or None with fewer than :data:`BACKGROUND_MIN` of them (or no
    spread). A hit's similarity standardised by them (``Hit.vector_z``) says how far it stands out
    of this question's neighbourhood in this scope, in no model's own cosine scale: an embedder
    whose cosines run high, or a corpus of one genre, raise the background as much as the hit."""
    tail = [1.0 - float(r["distance"]) for r in vector[BACKGROUND_FROM:]]
    if len(tail) < BACKGROUND_MIN:
        return None
    mean, sd = statistics.fmean(tail), statistics.pstdev(tail)
    return (mean, sd) if sd > 1e-9 else None


def _list_ranks(
    vector: list[dict], lexical: list[dict], keys: set[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, float | int]]:
    """Each of ``keys``' rank and raw score in the lists that have it (a key a list repeats: its
    last place there), for the kept hits alone: the other candidates never become hits."""
    ranks: dict[tuple[str, int], dict[str, float | int]] = {key: {} for key in keys}
    bg = background(vector)
    for rank, row in enumerate(vector, start=1):
        found = ranks.get((row["doc_id"], row["chunk_no"]))
        if found is not None:
            found["vector_rank"] = rank
            found["vector_distance"] = float(row["distance"])
            if bg is not None:
                found["vector_z"] = round((1.0 - float(row["distance"]) - bg[0]) / bg[1], 4)
    for rank, row in enumerate(lexical, start=1):
        found = ranks.get((row["doc_id"], row["chunk_no"]))
        if found is not None:
            found["lexical_rank"] = rank
            found["lexical_score"] = float(row["rank"])
    return ranks
