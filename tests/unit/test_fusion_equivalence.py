"""The fusion of one search gives the same hits, byte for byte, as the straightforward implementation
it was made cheaper than.

The references below compute what :func:`ragline.query.retrieval.hybrid.fuse`,
:func:`ragline.query.retrieval.fusion.convex` / :func:`~ragline.query.retrieval.fusion.normalize`
and :func:`ragline.query.retrieval.ranking.structural` computed before the queue path's per-search
cost was cut: every candidate keeps its ranks, every list is added to every sum, the clip is two
calls, every structural signal is evaluated. The matrix covers both fusion methods, the three
normalizations, prose, code and empty questions, an empty lexical or vector list, repeated keys,
a partly embedded scope (``vector_share`` below 1, a degraded vector list), bonuses and
penalties, and the structural settings that decide whether the re-score runs.
"""

from __future__ import annotations

import json
import random
import statistics

import pytest

from ragline.query.retrieval import fusion, hybrid, ranking, sql, structure
from ragline.shared.config.settings import CodeSettings, Settings
from ragline.shared.sdk.contracts import SearchRequest

RU = "Текст на русском языке о погоде и о городе, длинный абзац."
QUERIES = [
    "погода в городе",
    "what is the weather in the city",
    "where is register_hook defined?",
    "how are the default headers merged",
    "",
]


# ------------------------------------------------------------------ the implementations made cheaper
def _reference_normalize(scores, how="minmax"):
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
    else:
        lo, hi = min(scores), max(scores)
    if hi <= lo:
        return [1.0 for _ in scores]
    return [min(1.0, max(0.0, (s - lo) / (hi - lo))) for s in scores]


def _reference_convex(lists, weights, how="minmax"):
    fused, first = {}, {}
    for ranked in lists.values():
        for item, _ in ranked:
            first.setdefault(item, len(first))
    for name, ranked in lists.items():
        w = weights.get(name, 1.0)
        normed = _reference_normalize([s for _, s in ranked], how)
        floor = min(normed) if how == "zscore" and normed else 0.0
        present = {item: n for (item, _), n in zip(ranked, normed, strict=True)}
        for item in first:
            fused[item] = fused.get(item, 0.0) + w * present.get(item, floor)
    return sorted(fused.items(), key=lambda kv: (-kv[1], first[kv[0]]))


def _reference_fused_keys(vector, lexical, settings, query, vector_share):
    policy = hybrid.fusion_policy(query, settings, [*vector, *lexical]).covering(vector_share)
    vec, lex, passages = fusion.hybrid_inputs(vector, lexical)
    w_lex = policy.lexical_weight_for(query, passages if lex else [])
    if policy.method == "convex":
        scale = w_lex / policy.lexical_weight if policy.lexical_weight > 0 else 1.0
        fused = _reference_convex(
            {"vector": vec, "lexical": lex},
            {
                "vector": (1.0 - policy.convex_lexical) * policy.vector_share,
                "lexical": policy.convex_lexical * scale,
            },
            policy.normalization,
        )
        return [(key, score / (policy.rrf_k + 1)) for key, score in fused]
    return fusion.rrf(
        {"vector": [k for k, _ in vec], "lexical": [k for k, _ in lex]},
        k=policy.rrf_k,
        weights={"vector": policy.vector_rrf_weight, "lexical": w_lex},
    )


def _reference_fuse(vector, lexical, settings, limit, query, vector_share):
    rows, ranks = {}, {}
    for rank, row in enumerate(vector, start=1):
        key = (row["doc_id"], row["chunk_no"])
        rows.setdefault(key, row)
        ranks.setdefault(key, {}).update(vector_rank=rank, vector_distance=float(row["distance"]))
    for rank, row in enumerate(lexical, start=1):
        key = (row["doc_id"], row["chunk_no"])
        rows.setdefault(key, row)
        ranks.setdefault(key, {}).update(lexical_rank=rank, lexical_score=float(row["rank"]))
    scored = []
    for position, (key, score) in enumerate(
        _reference_fused_keys(vector, lexical, settings, query, vector_share)
    ):
        row = rows[key]
        final = round(score + float(row["prefer_bonus"]) - float(row["test_penalty"]), 8)
        scored.append((final, position, key, score))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [
        sql.hit(rows[key], score=final, fused_score=round(score, 8), **ranks[key])
        for final, _, key, score in scored[:limit]
    ]


def _reference_structural(req, vector, lexical, settings):
    if not ranking.structure_on(req, settings):
        return False
    named = structure.named(req.query)
    if named.files or named.identifiers:
        return True
    rows = [*vector, *lexical]
    if any(sql.metadata(r["metadata"]).get("related_code") for r in rows):
        return True
    words = structure.question_words(req.query)
    spelled = any(
        structure.spelled_definitions(
            words, [s for s in sql.metadata(r["metadata"]).get("symbols") or [] if isinstance(s, str)]
        )
        for r in rows
    )
    if settings.code.spelled_bonus > 0 and spelled:
        return True
    ranks = {structure.layer_rank(r["layer"], settings.code.layer_ranks) for r in rows}
    return settings.code.layer_step > 0 and len(ranks) > 1


# --------------------------------------------------------------------------------- constructed lists
def _row(rnd: random.Random, doc: str, n: int, **kw) -> dict:
    code = doc.startswith("code")
    metadata: dict = {}
    if code and rnd.random() < 0.5:
        metadata = {"span_start": n * 10 + 1, "span_end": n * 10 + 9, "symbols": ["default_headers", "merge"]}
    if not code and rnd.random() < 0.15:
        metadata = {"related_code": ["code0.py"]}
    return {
        "doc_id": doc,
        "chunk_no": n,
        "path": f"{doc}.py" if code else f"{doc}.md",
        "layer": rnd.choice(["C0_SOURCE_CHUNKS", "C0_TEST_CHUNKS"]) if code else "docs",
        "heading_path": rnd.choice(["", "Guide > Weather"]),
        "content": RU,
        "context": "",
        "page": rnd.choice([None, 3]),
        "metadata": metadata,
        "prefer_bonus": rnd.choice([0.0, 0.0, 0.002]),
        "test_penalty": rnd.choice([0.0, 0.0, 0.001]),
        **kw,
    }


def _lists(seed: int, code: bool, lexical_share: float) -> tuple[list[dict], list[dict]]:
    """A vector list (by distance, ties included) and a lexical list (by score) over the same
    documents; keys may repeat within a list, as a feedback pass's merged lists can."""
    rnd = random.Random(seed)
    docs = [("code" if code and i % 3 == 0 else "d") + str(i) for i in range(rnd.randint(0, 60))]
    vector = sorted(
        (
            _row(rnd, d, rnd.randint(0, 2), distance=round(rnd.uniform(0.05, 0.9), rnd.choice([2, 6])))
            for d in rnd.sample(docs, len(docs))
        ),
        key=lambda r: r["distance"],
    )
    lexical = sorted(
        (
            _row(rnd, d, rnd.randint(0, 2), rank=round(rnd.uniform(0.0, 20.0), rnd.choice([1, 6])))
            for d in rnd.sample(docs, int(len(docs) * lexical_share))
        ),
        key=lambda r: -r["rank"],
    )
    return vector, lexical


def _settings(method: str, method_code: str, norm: str, layer_step: float, spelled: float) -> Settings:
    s = Settings(fusion_method=method, fusion_method_code=method_code, fusion_normalization=norm)
    code = CodeSettings().model_copy(update={"layer_step": layer_step, "spelled_bonus": spelled})
    return s.model_copy(update={"code": code})


def _bytes(hits) -> str:
    return json.dumps([h.model_dump() for h in hits], sort_keys=False)


SETTINGS = [
    _settings(m, mc, norm, step, spelled)
    for m, mc in (("convex", "rrf"), ("rrf", "rrf"), ("convex", "convex"), ("rrf", "convex"))
    for norm, (step, spelled) in zip(
        ("minmax", "zscore", "dbsf"), ((0.0, 0.006), (0.0005, 0.0), (0.0, 0.0)), strict=True
    )
]


@pytest.mark.parametrize(
    "s",
    SETTINGS,
    ids=lambda s: f"{s.fusion.method}-{s.fusion.method_code}-{s.fusion.normalization}-{s.code.layer_step}",
)
@pytest.mark.parametrize("lexical_share", [0.0, 0.5, 1.0])
def test_fuse_gives_the_hits_the_reference_gives(s, lexical_share):
    compared = 0
    for seed in range(4):
        for code in (False, True):
            vector, lexical = _lists(seed, code, lexical_share)
            for query in QUERIES:
                for share in (1.0, 0.37, 0.0):
                    for limit in (1, 10, 100):
                        new = hybrid.fuse(vector, lexical, s, limit, query, share)
                        old = _reference_fuse(vector, lexical, s, limit, query, share)
                        assert _bytes(new) == _bytes(old)
                        compared += bool(old)
                    vec_only = hybrid.fuse([], lexical, s, 10, query, share)
                    assert _bytes(vec_only) == _bytes(_reference_fuse([], lexical, s, 10, query, share))
    assert compared > 0


@pytest.mark.parametrize("s", SETTINGS[:3])
def test_structural_decides_as_the_reference(s):
    decisions = set()
    for seed in range(20):
        for code in (False, True):
            vector, lexical = _lists(seed, code, 0.5)
            for query in QUERIES:
                for structure_on in (None, False, True):
                    req = SearchRequest(tenant="t", query=query, groups=["g"], structure=structure_on)
                    expected = _reference_structural(req, vector, lexical, s)
                    assert ranking.structural(req, vector, lexical, s) == expected
                    decisions.add(expected)
    assert decisions == {True, False}


@pytest.mark.parametrize("how", ["minmax", "zscore", "dbsf"])
def test_convex_and_normalize_as_the_reference(how):
    rnd = random.Random(7)
    for _ in range(300):
        keys = [f"k{i}" for i in range(rnd.randint(0, 30))]
        lists = {
            name: [
                (k, rnd.choice([round(rnd.uniform(-5, 5), 2), 1.0]))
                for k in rnd.sample(keys, rnd.randint(0, len(keys)))
            ]
            for name in ("vector", "lexical", "named")
        }
        weights = {"vector": rnd.choice([0.7, 0.0, -0.5]), "lexical": rnd.choice([0.3, 2.0])}
        for ranked in lists.values():
            scores = [s for _, s in ranked]
            assert fusion.normalize(scores, how) == _reference_normalize(scores, how)
        assert repr(fusion.convex(lists, weights, how)) == repr(_reference_convex(lists, weights, how))


def test_what_a_question_names_is_read_once_and_is_the_same_every_time():
    """The structural reading of a question is memoised (the search asks it several times): each
    answer equals a fresh reading, and the shared answer is frozen."""
    for query in [
        *QUERIES,
        "see requests/sessions.py and `Session.request`",
        "Traceback in models.py line 3",
    ]:
        fresh = structure.named.__wrapped__(query)
        assert structure.named(query) == fresh and structure.named(query) is structure.named(query)
        with pytest.raises(AttributeError):
            structure.named(query).files = ()  # type: ignore[misc]
