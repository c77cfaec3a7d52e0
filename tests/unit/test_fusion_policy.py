"""One fusion policy for every path that fuses lists.

Two kinds of tests: the rankings and scores of the policy are those of the implementations it
replaced (each kept below as a reference, verbatim in what it computes), on constructed lists;
and every path that fuses (hybrid retrieval, the named files, multi-query, the sweeps, the code
ablations) goes through :class:`FusionPolicy`, so a change of the policy reaches all of them.
"""

from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from ragline.operations import code_ablations
from ragline.operations import eval as evaluation
from ragline.query import service
from ragline.query.retrieval import fusion, hybrid, structure
from ragline.query.retrieval.fusion import FusionPolicy, convex, rrf
from ragline.query.retrieval.language import PASSAGES, lexical_weight
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import Hit, SearchRequest, SearchResponse

RU = "Текст на русском языке о погоде и о городе, длинный абзац."
QUERIES = ["погода в городе", "what is the weather in the city", "where is register_hook defined?", ""]


# ----------------------------------------------------------- the implementations the policy replaced
def _old_fusion_settings(settings):
    """0.1's fusion settings, read from today's methods (settings) and weights (the constants)."""
    p, c = fusion.PROSE, fusion.CODE
    return SimpleNamespace(
        method=settings.fusion.method,
        method_code=settings.fusion.method_code,
        rrf_k=p.rrf_k,
        rrf_weight_vector=p.vector_weight,
        rrf_weight_lexical=p.lexical_weight,
        rrf_weight_lexical_code=c.lexical_weight,
        rrf_weight_lexical_cross_script=p.cross_script_weight,
        convex_weight_lexical=p.convex_lexical,
        normalization=p.normalization,
    )


def _reference_fused_keys(vector, lexical, settings, query=""):
    old = _old_fusion_settings(settings)
    rows = [*vector, *lexical]
    prose = (old.method, old.rrf_weight_lexical)
    code = (old.method_code, old.rrf_weight_lexical_code)
    fusion, base = prose if code == prose else code if hybrid.code_retrieval(query, settings, rows) else prose
    w_lex = lexical_weight(
        query,
        [row["content"] for row in vector[:PASSAGES]] if lexical else [],
        base,
        old.rrf_weight_lexical_cross_script,
    )
    if fusion == "convex":
        share = old.convex_weight_lexical * (w_lex / base if base > 0 else 1.0)
        fused = convex(
            {
                "vector": [
                    ((row["doc_id"], row["chunk_no"]), 1.0 - float(row["distance"])) for row in vector
                ],
                "lexical": [((row["doc_id"], row["chunk_no"]), float(row["rank"])) for row in lexical],
            },
            weights={"vector": 1.0 - old.convex_weight_lexical, "lexical": share},
            how=old.normalization,
        )
        return [(key, score / (old.rrf_k + 1)) for key, score in fused]
    return rrf(
        {
            "vector": [(row["doc_id"], row["chunk_no"]) for row in vector],
            "lexical": [(row["doc_id"], row["chunk_no"]) for row in lexical],
        },
        k=old.rrf_k,
        weights={"vector": old.rrf_weight_vector, "lexical": w_lex},
    )


def _reference_sweep(runs, weights, rrf_k, cross_script_weight):
    out = []
    for wv, wl in weights:
        ranked = []
        for row, hits in runs:
            lists = {
                mode: [(h["doc_id"], h["chunk_no"]) for h in hits[mode]] for mode in ("vector", "lexical")
            }
            passages = [h["content"] for h in hits["vector"][:PASSAGES]] if lists["lexical"] else []
            w = (
                wl
                if cross_script_weight is None
                else lexical_weight(row["query"], passages, wl, cross_script_weight)
            )
            ranked.append([key for key, _ in rrf(lists, k=rrf_k, weights={"vector": wv, "lexical": w})])
        out.append(ranked)
    return out


# --------------------------------------------------------------------------------- constructed lists
def _row(doc: str, n: int, **kw) -> dict:
    return {
        "doc_id": doc,
        "chunk_no": n,
        "path": f"{doc}.py" if doc.startswith("code") else f"{doc}.md",
        "layer": "C0_SOURCE_CHUNKS" if doc.startswith("code") else "docs",
        "heading_path": "",
        "content": RU,
        "context": "",
        "page": None,
        "metadata": {},
        "prefer_bonus": 0.0,
        "test_penalty": 0.0,
        "distance": 0.5,
        "rank": 0.5,
        **kw,
    }


def _lists(seed: int, code: bool = False) -> tuple[list[dict], list[dict]]:
    rnd = random.Random(seed)
    docs = [("code" if code and i % 3 == 0 else "d") + str(i) for i in range(rnd.randint(0, 12))]
    vector = sorted(
        (
            _row(d, rnd.randint(0, 2), distance=round(rnd.uniform(0.05, 0.9), 3))
            for d in rnd.sample(docs, len(docs))
        ),
        key=lambda r: r["distance"],
    )
    lexical = sorted(
        (
            _row(d, rnd.randint(0, 2), rank=round(rnd.uniform(0.0, 20.0), 3))
            for d in rnd.sample(docs, len(docs) // 2)
        ),
        key=lambda r: -r["rank"],
    )
    return _unique(vector), _unique(lexical)


def _unique(rows: list[dict]) -> list[dict]:
    seen, out = set(), []
    for r in rows:
        if (r["doc_id"], r["chunk_no"]) not in seen:
            seen.add((r["doc_id"], r["chunk_no"]))
            out.append(r)
    return out


#: the methods (settings) and the policies' weights (the constants an evaluation replaces)
SETTINGS = st.builds(
    lambda method, method_code, norm, w_lex, w_code, w_cross, share, k: (
        Settings(fusion_method=method, fusion_method_code=method_code),
        FusionPolicy(
            rrf_k=k,
            lexical_weight=w_lex,
            cross_script_weight=w_cross,
            convex_lexical=share,
            normalization=norm,
        ),
        w_code,
    ),
    st.sampled_from(["rrf", "convex"]),
    st.sampled_from(["rrf", "convex"]),
    st.sampled_from(["minmax", "zscore", "dbsf"]),
    st.sampled_from([0.0, 0.0175, 0.5, 1.0]),
    st.sampled_from([0.0, 0.1, 1.0]),
    st.sampled_from([0.0, 0.01, 2.0]),
    st.sampled_from([0.0, 0.3, 0.6, 1.0]),
    st.sampled_from([1, 60]),
)


@hsettings(max_examples=120, deadline=None)
@given(SETTINGS, st.integers(0, 10_000), st.sampled_from(QUERIES), st.booleans())
def test_hybrid_fusion_ranks_and_scores_as_before(configured, seed, query, code):
    s, prose, w_code = configured
    vector, lexical = _lists(seed, code)
    with (
        mock.patch.object(fusion, "PROSE", prose),
        mock.patch.object(fusion, "CODE", replace(prose, method="rrf", lexical_weight=w_code)),
    ):
        assert hybrid.fused_keys(vector, lexical, s, query) == _reference_fused_keys(
            vector, lexical, s, query
        )


def test_the_default_settings_fuse_as_before_on_prose_and_code():
    s = Settings()
    for seed in range(50):
        for code in (False, True):
            vector, lexical = _lists(seed, code)
            for query in QUERIES:
                assert hybrid.fused_keys(vector, lexical, s, query) == _reference_fused_keys(
                    vector, lexical, s, query
                )


def _hit(doc: str, n: int = 0, **kw) -> Hit:
    return Hit(doc_id=doc, chunk_no=n, **kw)


def test_named_files_add_the_same_rrf_terms_as_before():
    hits = [
        _hit("a", score=0.02, fused_score=0.02),
        _hit("b", score=0.01, fused_score=0.01, prefer_bonus=0.005),
    ]
    named = [_hit("c", prefer_bonus=0.005), _hit("b"), _hit("d", test_penalty=0.005)]
    for k in (1, 60):
        out = structure.with_named(hits, named, 0.5, FusionPolicy(rrf_k=k))
        by = {h.doc_id: h for h in out}
        assert by["c"].fused_score == round(0.5 / (k + 1), 8) and by["c"].named_rank == 1
        assert by["c"].score == round(0.005 + round(0.5 / (k + 1), 8), 8)
        assert by["b"].fused_score == round(0.01 + round(0.5 / (k + 2), 8), 8)
        assert by["d"].score == round(-0.005 + round(0.5 / (k + 3), 8), 8)
        assert [h.doc_id for h in out] == ["a", "b", "c", "d"]


def test_code_ablations_recompute_the_same_rrf_scores_as_before():
    hits = [
        _hit("a", vector_rank=1, lexical_rank=3),
        _hit("b", vector_rank=2, named_rank=1, prefer_bonus=0.005),
        _hit("c", lexical_rank=1, test_penalty=0.005),
        _hit("d", named_rank=2),
    ]
    for wv, wl, wn in [(1.0, 0.1, 0.5), (1.0, 0.0, 0.0), (0.5, 2.0, 1.0)]:
        out = code_ablations.refuse(
            hits, structure.Weights(named=wn), FusionPolicy(rrf_k=60, vector_weight=wv, lexical_weight=wl)
        )
        expected = []
        for pos, h in enumerate(hits):
            parts = [(wv, h.vector_rank), (wl, h.lexical_rank), (wn, h.named_rank)]
            if not any(w and r for w, r in parts):
                continue
            fused = round(sum(w / (60 + r) for w, r in parts if r), 8)
            expected.append((round(fused + h.prefer_bonus - h.test_penalty, 8), pos, h.doc_id, fused))
        expected.sort(key=lambda t: (-t[0], t[1]))
        assert [(h.score, h.doc_id, h.fused_score) for h in out] == [(s, d, f) for s, _, d, f in expected]


def _runs(seed: int) -> list[tuple[dict, dict]]:
    out = []
    for i in range(8):
        vector, lexical = _lists(seed * 100 + i)
        hits = {
            "vector": [{**r, "vector_distance": r["distance"]} for r in vector],
            "lexical": [{**r, "lexical_score": r["rank"]} for r in lexical],
        }
        out.append(({"query": QUERIES[i % 3], "relevant": {"d1": 1}}, hits))
    return out


@pytest.mark.parametrize("cross_script", [None, 0.0, 0.01])
def test_the_rrf_sweep_ranks_as_before(cross_script, monkeypatch):
    ranked: list[list] = []
    real_add = evaluation.ModeReport.add

    def add(self, query, ranking, relevant):
        ranked.append(list(ranking))
        return real_add(self, query, ranking, relevant)

    monkeypatch.setattr(evaluation.ModeReport, "add", add)
    weights = [(1.0, 1.0), (1.0, 0.0175), (1.0, 0.0), (0.5, 2.0)]
    for seed in range(5):
        runs = _runs(seed)
        ranked.clear()
        evaluation.sweep_rrf([], None, weights, rrf_k=60, cross_script_weight=cross_script, runs=runs)
        reference = _reference_sweep(runs, weights, 60, cross_script)
        docs = [
            [list(dict.fromkeys(key[0] for key in keys)) for keys in per_weight] for per_weight in reference
        ]
        assert ranked == [r for per_weight in docs for r in per_weight]


# ---------------------------------------------------------------- every path goes through the policy
class _Spy:
    """Counts the policy's entry points and shifts every score, so a path that fuses by hand shows."""

    def __init__(self, monkeypatch):
        self.calls: dict[str, int] = {}
        for name in ("hybrid", "rank_term", "by_rank"):
            real = getattr(FusionPolicy, name)
            monkeypatch.setattr(FusionPolicy, name, self._wrap(name, real))

    def _wrap(self, name, real):
        def wrapped(policy, *args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return real(policy, *args, **kwargs)

        return wrapped


def _hybrid_retrieval(spy):
    vector, lexical = _lists(1)
    hybrid.fuse(vector, lexical, Settings(), limit=5, query="погода")
    return "hybrid"


def _named_files(spy):
    structure.with_named([_hit("a")], [_hit("b")], 0.5, FusionPolicy.from_settings(Settings(), code=True))
    return "rank_term"


def _code_ablation(spy):
    code_ablations.refuse([_hit("a", vector_rank=1)], structure.Weights(), FusionPolicy())
    return "rank_term"


def _multi_query(spy, monkeypatch):
    answers = iter([SearchResponse(hits=[_hit("a"), _hit("b")]), SearchResponse(hits=[_hit("b"), _hit("c")])])
    monkeypatch.setattr(service, "retrieve", lambda req, limit: next(answers))
    req = SearchRequest(query="q", tenant="t", groups=["g"])
    hits, *_ = service.gather(req, ["q", "q2"], None, 5)
    assert [h.doc_id for h in hits] == ["b", "a", "c"]
    return "by_rank"


def _rrf_sweep(spy):
    evaluation.sweep_rrf([], None, [(1.0, 0.5)], runs=_runs(0))
    return "hybrid"


def _fusion_sweep(spy):
    evaluation.sweep_fusion([], None, [{"method": "rrf"}, {"method": "convex"}], Settings(), runs=_runs(0))
    return "hybrid"


@pytest.mark.parametrize(
    "path", [_hybrid_retrieval, _named_files, _code_ablation, _multi_query, _rrf_sweep, _fusion_sweep]
)
def test_every_path_that_fuses_calls_the_policy(path, monkeypatch):
    spy = _Spy(monkeypatch)
    if path is _multi_query:
        monkeypatch.setattr(service, "get_settings", Settings)
        entry = path(spy, monkeypatch)
    else:
        entry = path(spy)
    assert spy.calls.get(entry, 0) >= 1, f"{path.__name__} fused without FusionPolicy.{entry}: {spy.calls}"


def test_the_policy_is_the_constants_with_the_methods_the_settings_choose():
    s = Settings(fusion_method="rrf", fusion_method_code="convex")
    assert FusionPolicy.from_settings(s) == replace(fusion.PROSE, method="rrf")
    assert FusionPolicy.from_settings(s, code=True) == replace(fusion.CODE, method="convex")
    # the weights 0.1 shipped as settings' defaults (method, rrf_k, vector, lexical, cross-script,
    # convex share, normalization)
    assert fusion.PROSE == FusionPolicy("convex", 60, 1.0, 0.0175, 0.0, 0.3, "minmax")
    assert fusion.CODE == FusionPolicy("rrf", 60, 1.0, 0.1, 0.0, 0.3, "minmax")


# ------------------------------------------------------------- a scope only partly embedded yet
def _partly_embedded() -> tuple[list[dict], list[dict]]:
    """A scope whose vector list saw only a few rows (stored before their vectors): ``lex*`` rows
    only the lexical list found (they have no vector yet), ``vec*`` rows only the vector list."""
    vector = [_row(f"code-vec{i}", 0, distance=0.2 + i / 100) for i in range(5)]
    lexical = [_row(f"code-lex{i}", 0, rank=10.0 - i) for i in range(5)]
    return vector, lexical


@pytest.mark.parametrize("fusion", ["rrf", "convex"])
def test_a_vector_list_over_a_sliver_of_the_scope_does_not_outrank_the_lexical_list(fusion):
    s = Settings(fusion_method=fusion, fusion_method_code=fusion)
    vector, lexical = _partly_embedded()
    query = "where is register_hook defined?"
    sliver = [h.doc_id for h in hybrid.fuse(vector, lexical, s, 10, query, vector_share=0.02)]
    # (convex: the lexical list's last row is its minimum, 0 after min-max, whatever the share)
    assert sliver[:4] == [f"code-lex{i}" for i in range(4)], sliver
    # fully embedded the lists fuse as before (the reference above), whatever the share did
    full = [key[0] for key, _ in hybrid.fused_keys(vector, lexical, s, query, vector_share=1.0)]
    assert full == [key[0] for key, _ in _reference_fused_keys(vector, lexical, s, query)]
    assert full[0].startswith("code-vec")


@pytest.mark.parametrize("share", [0.0, 0.02, 0.5, 1.0])
def test_the_vector_weight_scales_with_the_share_in_every_method(share):
    policy = FusionPolicy.from_settings(Settings(), code=True).covering(share)
    assert policy.vector_rrf_weight == pytest.approx(fusion.CODE.vector_weight * share)
    vec, lex = [("v", 0.9)], [("l", 5.0)]
    rrf_scores = dict(policy.hybrid("register_hook", vec, lex))
    assert rrf_scores["v"] == pytest.approx(policy.vector_weight * share / (policy.rrf_k + 1))
    convex_policy = FusionPolicy(method="convex").covering(share)
    convex_scores = dict(convex_policy.hybrid("q", vec, lex))
    assert convex_scores["v"] == pytest.approx(
        (1 - convex_policy.convex_lexical) * share / (convex_policy.rrf_k + 1)
    )
    assert (
        FusionPolicy().covering(7.0).vector_share == 1.0 and FusionPolicy().covering(-1).vector_share == 0.0
    )


def test_the_code_ablation_weighs_the_vector_list_by_the_share_it_saw():
    hits = [_hit("v", vector_rank=1), _hit("l", lexical_rank=1)]
    policy = FusionPolicy(method="rrf", vector_weight=1.0, lexical_weight=0.1)
    assert [h.doc_id for h in code_ablations.refuse(hits, structure.Weights(), policy)] == ["v", "l"]
    partly = code_ablations.refuse(hits, structure.Weights(), policy.covering(0.02))
    assert [h.doc_id for h in partly] == ["l", "v"]
