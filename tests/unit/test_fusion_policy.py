"""One fusion policy for every path that fuses lists: its behaviour on real passages and questions.

The passages are xquad-ru's Russian corpus, the questions its Russian and English dev questions and
swe-loc-dev's issues; hypothesis draws which passages each list found, in what order and with what
scores. The properties: fusion loses and invents no candidate; a candidate both lists put first
comes first; moving a candidate up a list never moves it down the fused order; a list of weight 0
cannot change the order; an English question over Russian passages keeps the vector order; the
code fusion runs exactly for code retrieval; the vector weight follows the share of the scope the
vector list saw. And every path that fuses (hybrid retrieval, the named files, multi-query, the
sweeps, the code ablations) goes through :class:`FusionPolicy`, so a change of it reaches all of them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache

import pytest
from hypothesis import assume, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from ragline.operations import code_ablations
from ragline.operations import eval as evaluation
from ragline.query import service
from ragline.query.retrieval import fusion, structure
from ragline.query.retrieval.fusion import FusionPolicy
from ragline.query.retrieval.language import PASSAGES, cross_script
from ragline.query.retrieval.ranking import RankingPolicy
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import Hit
from tests.conftest import DATASETS

XQUAD = DATASETS / "xquad-ru"
SWE = DATASETS / "swe-loc-dev" / "instances.jsonl"
pytestmark = pytest.mark.skipif(
    not (XQUAD / "corpus.jsonl").is_file() or not SWE.is_file(), reason="datasets not present"
)


def _jsonl(path, n: int) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:n]]


@cache
def passages() -> list[dict]:
    return _jsonl(XQUAD / "corpus.jsonl", 40)


@cache
def questions() -> dict[str, list[str]]:
    return {
        "ru": [r["query"] for r in _jsonl(XQUAD / "dev.jsonl", 20)],
        "en": [r["query"] for r in _jsonl(XQUAD / "dev-en.jsonl", 20)],
        "code": [r["query"][:2000] for r in _jsonl(SWE, 10)],
    }


def _row(passage: dict, *, code: bool = False, **kw) -> dict:
    return {
        "doc_id": passage["id"],
        "chunk_no": 0,
        "path": f"pkg/{passage['id'].lower()}.py" if code else f"{passage['id']}.md",
        "layer": "C0_SOURCE_CHUNKS" if code else "docs",
        "heading_path": "",
        "content": passage["text"],
        "context": "",
        "page": None,
        "metadata": {},
        **kw,
    }


@st.composite
def searches(draw, kinds=("ru", "en", "code")):
    """A question and the two lists a search found for it: distinct passages, best first."""
    kind = draw(st.sampled_from(kinds))
    question = draw(st.sampled_from(questions()[kind]))
    pool = passages()
    found = draw(st.lists(st.integers(0, len(pool) - 1), unique=True, min_size=1, max_size=12))
    lexical_ids = draw(st.lists(st.integers(0, len(pool) - 1), unique=True, max_size=12))
    distances = sorted(draw(st.lists(st.floats(0.05, 0.95), min_size=len(found), max_size=len(found))))
    scores = sorted(
        draw(st.lists(st.floats(0.01, 30.0), min_size=len(lexical_ids), max_size=len(lexical_ids))),
        reverse=True,
    )
    vector = [_row(pool[i], distance=d) for i, d in zip(found, distances, strict=True)]
    lexical = [_row(pool[i], rank=r) for i, r in zip(lexical_ids, scores, strict=True)]
    return question, vector, lexical


METHODS = st.sampled_from(["rrf", "convex"])


def _policy(question: str, method: str, **weights) -> RankingPolicy:
    s = Settings(fusion_method=method, fusion_method_code=method)
    p = RankingPolicy.for_question(question, s)
    return replace(p, prose=replace(p.prose, **weights), code=replace(p.code, **weights))


def _keys(rows: list[dict]) -> list[tuple[str, int]]:
    return [(r["doc_id"], r["chunk_no"]) for r in rows]


# ------------------------------------------------------------------------------------ properties
@hsettings(max_examples=150, deadline=None)
@given(searches(), METHODS, st.floats(0.0, 1.0))
def test_fusion_keeps_every_candidate_once_and_invents_none(search, method, share):
    question, vector, lexical = search
    fused = _policy(question, method).fused_keys(vector, lexical, share)
    keys = [key for key, _ in fused]
    assert sorted(keys) == sorted(set(_keys(vector)) | set(_keys(lexical)))
    assert [score for _, score in fused] == sorted((score for _, score in fused), reverse=True)


@hsettings(max_examples=150, deadline=None)
@given(searches(kinds=("ru", "code")), METHODS)
def test_a_candidate_both_lists_put_first_comes_first(search, method):
    question, vector, lexical = search
    top = vector[0]
    lexical = [{**top, "rank": 100.0}, *(r for r in lexical if r["doc_id"] != top["doc_id"])]
    fused = _policy(question, method).fused_keys(vector, lexical)
    assert fused[0][0] == _keys(vector)[0]


@hsettings(max_examples=150, deadline=None)
@given(searches(), st.data())
def test_moving_a_candidate_up_a_list_never_moves_it_down_the_rrf_order(search, data):
    question, vector, lexical = search
    if len(vector) < 2:
        return
    i = data.draw(st.integers(1, len(vector) - 1))
    moved = [*vector[: i - 1], vector[i], vector[i - 1], *vector[i + 1 :]]
    policy = _policy(question, "rrf")
    key = _keys(vector)[i]
    before = [k for k, _ in policy.fused_keys(vector, lexical)].index(key)
    after = [k for k, _ in policy.fused_keys(moved, lexical)].index(key)
    assert after <= before


@hsettings(max_examples=100, deadline=None)
@given(searches(kinds=("ru",)), METHODS)
def test_a_lexical_list_of_weight_zero_leaves_the_vector_order(search, method):
    question, vector, lexical = search
    zero = {"lexical_weight": 0.0} if method == "rrf" else {"convex_lexical": 0.0}
    fused = [key for key, _ in _policy(question, method, **zero).fused_keys(vector, lexical)]
    assert fused[: len(vector)] == _keys(vector)


@hsettings(max_examples=100, deadline=None)
@given(searches(kinds=("en",)), METHODS)
def test_an_english_question_over_russian_passages_keeps_the_vector_order(search, method):
    """The shipped prose fusion gives a cross-script question's lexical list no weight: its words can
    only match the passages' stray Latin tokens."""
    question, vector, lexical = search
    # a question holding a number or an identifier is not cross-script: both spell it alike
    assume(cross_script(question, [r["content"] for r in vector[:PASSAGES]]))
    policy = RankingPolicy.for_question(question, Settings(fusion_method=method))
    fused = [key for key, _ in policy.fused_keys(vector, lexical)]
    assert fused[: len(vector)] == _keys(vector)


@hsettings(max_examples=100, deadline=None)
@given(searches(), st.booleans())
def test_the_code_fusion_runs_exactly_for_code_retrieval(search, code_rows):
    question, vector, lexical = search
    if code_rows:
        vector = [r | {"layer": "C0_SOURCE_CHUNKS"} for r in vector]
    policy = RankingPolicy.for_question(question, Settings())
    chosen = policy.fusion([*vector, *lexical])
    assert (chosen == fusion.CODE) is (policy.names_code or code_rows)
    assert chosen in (fusion.CODE, replace(fusion.PROSE, method=Settings().fusion.method))


@pytest.mark.parametrize("method", ["rrf", "convex"])
def test_a_vector_list_over_a_sliver_of_the_scope_does_not_outrank_the_lexical_list(method):
    """A scope whose vector list saw a few rows only (code stored before its vectors): the lexical
    list's rows, which the vector list could not see, lead; fully embedded, the vector list's first."""
    vector = [_row(p, code=True, distance=0.2 + i / 100) for i, p in enumerate(passages()[:5])]
    lexical = [_row(p, code=True, rank=10.0 - i) for i, p in enumerate(passages()[5:10])]
    policy = RankingPolicy.for_question(
        "where is register_hook defined?", Settings(fusion_method_code=method)
    )
    sliver = [h.doc_id for h in policy.fuse(vector, lexical, 10, vector_share=0.02)]
    # (convex: the lexical list's last row is its minimum, 0 after min-max, whatever the share)
    assert sliver[:4] == [r["doc_id"] for r in lexical[:4]], sliver
    full = [h.doc_id for h in policy.fuse(vector, lexical, 10, vector_share=1.0)]
    assert full[0] == vector[0]["doc_id"]


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


def test_the_policy_is_the_constants_with_the_methods_the_settings_choose():
    s = Settings(fusion_method="rrf", fusion_method_code="convex")
    assert FusionPolicy.from_settings(s) == replace(fusion.PROSE, method="rrf")
    assert FusionPolicy.from_settings(s, code=True) == replace(fusion.CODE, method="convex")
    # the weights 0.1 shipped as settings' defaults (method, rrf_k, vector, lexical, cross-script,
    # convex share, normalization)
    assert fusion.PROSE == FusionPolicy("convex", 60, 1.0, 0.0175, 0.0, 0.3, "minmax")
    assert fusion.CODE == FusionPolicy("rrf", 60, 1.0, 0.1, 0.0, 0.3, "minmax")


def _hit(doc: str, n: int = 0, **kw) -> Hit:
    return Hit(doc_id=doc, chunk_no=n, **kw)


def test_the_code_ablation_recomputes_the_scores_the_search_gave_the_named_files():
    """The evaluation's re-fusion from ranks (:func:`code_ablations.refuse`) gives the candidates of a
    search with the named files the fused scores that search gave them, so an ablation at the
    shipped weights measures what the product ranks."""
    policy = RankingPolicy.for_question("error in pkg/registry.py", Settings())
    vector = [_row(p, code=True, distance=0.1 + i / 10) for i, p in enumerate(passages()[:4])]
    lexical = [_row(p, code=True, rank=5.0 - i) for i, p in enumerate(passages()[2:6])]
    named = [Hit(doc_id=p["id"], chunk_no=0) for p in (passages()[7], passages()[1])]
    hits = structure.with_named(policy.fuse(vector, lexical, 20), named, policy.weights.named, policy.code)
    refused = {h.doc_id: h.fused_score for h in code_ablations.refuse(hits, policy.weights, policy.code)}
    assert refused == {h.doc_id: pytest.approx(h.fused_score, abs=2e-8) for h in hits}


def test_the_code_ablation_weighs_the_vector_list_by_the_share_it_saw():
    hits = [_hit("v", vector_rank=1), _hit("l", lexical_rank=1)]
    policy = FusionPolicy(method="rrf", vector_weight=1.0, lexical_weight=0.1)
    assert [h.doc_id for h in code_ablations.refuse(hits, structure.Weights(), policy)] == ["v", "l"]
    partly = code_ablations.refuse(hits, structure.Weights(), policy.covering(0.02))
    assert [h.doc_id for h in partly] == ["l", "v"]


# ---------------------------------------------------------------- every path goes through the policy
class _Spy:
    """Counts the policy's entry points, so a path that fuses by hand shows."""

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


def _runs() -> list[tuple[dict, dict]]:
    out = []
    for i, question in enumerate(questions()["ru"][:4]):
        vector = [_row(p, distance=0.1 + j / 10) for j, p in enumerate(passages()[i : i + 4])]
        lexical = [_row(p, rank=4.0 - j) for j, p in enumerate(passages()[i + 2 : i + 5])]
        hits = {
            "vector": [{**r, "vector_distance": r["distance"]} for r in vector],
            "lexical": [{**r, "lexical_score": r["rank"]} for r in lexical],
        }
        out.append(({"query": question, "relevant": {passages()[i]["id"]: 1}}, hits))
    return out


def _hybrid_retrieval(spy):
    vector = [_row(p, distance=0.2) for p in passages()[:3]]
    lexical = [{**r, "rank": 1.0} for r in vector[1:]]
    RankingPolicy.for_question(questions()["ru"][0], Settings()).fuse(vector, lexical, 5)
    return "hybrid"


def _named_files(spy):
    structure.with_named([_hit("a")], [_hit("b")], 0.5, FusionPolicy.from_settings(Settings(), code=True))
    return "rank_term"


def _code_ablation(spy):
    code_ablations.refuse([_hit("a", vector_rank=1)], structure.Weights(), FusionPolicy())
    return "rank_term"


def _multi_query(spy, monkeypatch):
    hits = service.fuse_variants([[_hit("a"), _hit("b")], [_hit("b"), _hit("c")]], FusionPolicy(), 5)
    assert [h.doc_id for h in hits] == ["b", "a", "c"]
    return "by_rank"


def _rrf_sweep(spy):
    evaluation.sweep_rrf([], None, [(1.0, 0.5)], runs=_runs())
    return "hybrid"


def _fusion_sweep(spy):
    evaluation.sweep_fusion([], None, [{"method": "rrf"}, {"method": "convex"}], Settings(), runs=_runs())
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
