"""A search's order, through :meth:`ragline.query.retrieval.ranking.RankingPolicy.order`, the one place it
is decided: behaviour over the paths a search can take (prose fusion, code fusion with the structural
re-score, the named files' list, the contract's order, a partly embedded scope, preferences and
penalties), and the policy itself (built once from the question, frozen, replaced for evaluation)."""

from __future__ import annotations

import dataclasses

import pytest

from ragline.query.retrieval import ranking, structure
from ragline.query.retrieval.ranking import PREFER_BONUS, TEST_PENALTY, PathPreferences
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import SearchRequest

SETTINGS = Settings()


def row(doc: str, *, layer: str = "docs", path: str = "", distance=None, rank=None, **kw) -> dict:
    return {
        "doc_id": doc,
        "chunk_no": 0,
        "path": path or f"{doc}.md",
        "layer": layer,
        "heading_path": "",
        "content": f"Текст документа {doc} о погоде в городе.",
        "context": "",
        "page": None,
        "metadata": kw.pop("metadata", {}),
        **({"distance": distance} if distance is not None else {}),
        **({"rank": rank} if rank is not None else {}),
    }


def vector_list(*docs: str, **kw) -> list[dict]:
    return [row(d, distance=0.1 + 0.05 * i, **kw) for i, d in enumerate(docs)]


def lexical_list(*docs: str, **kw) -> list[dict]:
    return [row(d, rank=1.0 - 0.1 * i, **kw) for i, d in enumerate(docs)]


def req(query: str, **kw) -> SearchRequest:
    return SearchRequest(tenant="t", query=query, groups=["g"], **kw)


def order(request, vector, lexical, named=(), limit=10, share=1.0):
    return ranking.RankingPolicy.of(request, SETTINGS).order(vector, lexical, list(named), limit, 50, share)


def test_a_prose_question_is_fused_and_cut_without_the_structural_pass():
    hits, structured = order(
        req("как устроена погода"), vector_list("a", "b", "c"), lexical_list("b", "a"), limit=2
    )
    assert not structured
    assert [h.doc_id for h in hits] == ["a", "b"]  # the vector list leads a prose fusion
    assert hits[0].score >= hits[1].score and all(h.structural_score is None for h in hits)
    assert hits[0].vector_rank == 1 and hits[0].lexical_rank == 2


def test_the_lexical_list_alone_orders_a_scope_without_vectors():
    """share 0: the vector list saw none of the scope, so it carries no weight."""
    hits, _ = order(req("как устроена погода"), vector_list("a", "b"), lexical_list("b", "a"), share=0.0)
    assert [h.doc_id for h in hits] == ["b", "a"]


TESTS = SETTINGS.code.tests_layer


def test_a_preferred_hit_gains_the_bonus_and_a_penalised_test_loses_the_penalty():
    """The request's preferences, read by the policy from each row's path and layer (no column of
    the statements): the bonus lifts a preferred path, the penalty lowers a row of the tests layer."""
    vector = [row("a", layer=TESTS, distance=0.2), row("b", path="docs/b.md", distance=0.2)]  # tied
    plain, _ = order(req("как устроена погода"), vector, [])
    assert [h.doc_id for h in plain] == ["a", "b"] and plain[0].prefer_bonus == plain[0].test_penalty == 0.0
    for asked in ({"prefer_path_prefixes": ["docs/"]}, {"prefer_like_patterns": ["*/b.?d"]}):
        hits, _ = order(req("как устроена погода", prefer_non_tests=True, **asked), vector, [])
        assert [h.doc_id for h in hits] == ["b", "a"]
        by_doc = {h.doc_id: h for h in hits}
        assert (by_doc["b"].prefer_bonus, by_doc["b"].test_penalty) == (PREFER_BONUS, 0.0)
        assert (by_doc["a"].prefer_bonus, by_doc["a"].test_penalty) == (0.0, TEST_PENALTY)
        assert by_doc["b"].score == round(by_doc["b"].fused_score + PREFER_BONUS, 8)
        assert by_doc["a"].score == round(by_doc["a"].fused_score - TEST_PENALTY, 8)


def _hits_of_every_path(request: SearchRequest, vector, lexical, named) -> dict[str, list]:
    """The hits of each way a search's hits are made: the prose fusion, the structural re-score,
    the named files' list, the contract's order and the file list's leads."""
    policy = ranking.RankingPolicy.of(request, SETTINGS)
    contract = ranking.RankingPolicy.of(request.model_copy(update={"ordering": "contract"}), SETTINGS)
    prose = ranking.RankingPolicy.of(request.model_copy(update={"query": "как устроена погода"}), SETTINGS)
    return {
        "prose": prose.order(vector, lexical, [], 10, 50, 1.0)[0],
        "structural": policy.order(vector, lexical, [], 10, 50, 1.0)[0],
        "named": policy.order(vector, lexical, named, 10, 50, 1.0)[0],
        "contract": contract.order(vector, lexical, named, 10, 50, 1.0)[0],
        "leads": [h for lead in policy.leads(vector, lexical, named) for h in lead],
    }


@pytest.mark.parametrize("path", ["prose", "structural", "named", "contract", "leads"])
def test_every_hit_carries_the_request_s_path_preferences_whichever_path_made_it(path):
    question = "the error in pkg/hooks.py when registering"
    vector = [
        row("caller", layer="C0_SOURCE_CHUNKS", path="pkg/client.py", distance=0.1),
        row("hooks", layer="C0_SOURCE_CHUNKS", path="pkg/hooks.py", distance=0.2),
        row("test", layer=TESTS, path="tests/test_hooks.py", distance=0.3),
    ]
    lexical = [row("test", layer=TESTS, path="tests/test_hooks.py", rank=2.0), row("caller", rank=1.0)]
    named = [row("registry", layer="C0_SOURCE_CHUNKS", path="pkg/hooks.py")]
    asked = req(question, prefer_like_patterns=["pkg/hook?.py"], prefer_non_tests=True)
    hits = _hits_of_every_path(asked, vector, lexical, named)[path]
    assert any(h.prefer_bonus for h in hits) and any(h.test_penalty for h in hits)
    for h in hits:
        assert h.prefer_bonus == (PREFER_BONUS if h.path == "pkg/hooks.py" else 0.0), h
        assert h.test_penalty == (TEST_PENALTY if h.layer == TESTS else 0.0), h
    plain = _hits_of_every_path(req(question), vector, lexical, named)[path]
    assert all(h.prefer_bonus == h.test_penalty == 0.0 for h in plain)


def test_a_named_file_no_list_found_enters_with_its_preferences_beside_its_rrf_term():
    question = 'Traceback:\n  File "/srv/app/pkg/registry.py", line 3, in run'
    vector = [row("caller", layer="C0_SOURCE_CHUNKS", path="pkg/client.py", distance=0.1)]
    named = [row("registry", layer=TESTS, path="pkg/registry.py")]
    asked = req(question, prefer_path_prefixes=["pkg/reg"], prefer_non_tests=True, structure=True)
    policy = dataclasses.replace(
        ranking.RankingPolicy.of(asked, SETTINGS), weights=structure.Weights(named=0.25)
    )
    registry = next(h for h in policy.order(vector, [], named, 10, 50, 1.0)[0] if h.doc_id == "registry")
    assert (registry.prefer_bonus, registry.test_penalty) == (PREFER_BONUS, TEST_PENALTY)
    assert registry.score == round(PREFER_BONUS - TEST_PENALTY + registry.fused_score, 8)


def test_the_preferences_are_the_request_s_and_the_tests_layer_the_settings():
    asked = req("q", prefer_path_prefixes=["", "docs/"], prefer_like_patterns=["", "*.md"])
    assert PathPreferences.of(asked, SETTINGS) == PathPreferences(("docs/",), ("*.md",), None)
    qa = Settings(code_tests_layer="QA")
    tests = PathPreferences.of(req("q", prefer_non_tests=True), qa)
    assert (
        tests.tests_layer == "QA"
        and tests.signals({"path": "t.py", "layer": "QA"})["test_penalty"] == TEST_PENALTY
    )
    assert tests.signals({"path": "t.py", "layer": TESTS})["test_penalty"] == 0.0
    assert ranking.RankingPolicy.of(asked, SETTINGS).paths == PathPreferences.of(asked, SETTINGS)


def test_a_question_naming_an_identifier_lifts_the_file_it_names_structurally():
    question = "the error in pkg/hooks.py when registering"
    vector = [
        row("caller", layer="C0_SOURCE_CHUNKS", path="pkg/client.py", distance=0.1),
        row("hooks", layer="C0_SOURCE_CHUNKS", path="pkg/hooks.py", distance=0.2),
    ]
    hits, structured = order(req(question), vector, [])
    assert structured
    assert hits[0].doc_id == "hooks" and hits[0].structural_score > 0
    off, structured_off = order(req(question, structure=False), vector, [])
    assert not structured_off and off[0].doc_id == "caller"


def test_the_named_files_join_as_a_third_list_even_when_no_retriever_found_them():
    question = 'Traceback:\n  File "/srv/app/pkg/registry.py", line 3, in run'
    vector = [row("caller", layer="C0_SOURCE_CHUNKS", path="pkg/client.py", distance=0.1)]
    named = [row("registry", layer="C0_SOURCE_CHUNKS", path="pkg/registry.py")]
    hits, structured = order(req(question), vector, [], named=named)
    assert structured
    registry = next(h for h in hits if h.doc_id == "registry")
    assert registry.named_rank == 1 and registry.vector_rank is None
    # its fused score is the named list's RRF term alone, the file bonus comes on top
    assert registry.fused_score == round(structure.WEIGHTS.named / 61, 8)
    assert registry.structural_score >= structure.WEIGHTS.file
    assert registry.score == round(registry.fused_score + registry.structural_score, 8)


def test_the_contract_order_puts_layers_in_rank_order_whatever_the_fused_scores():
    vector = [
        row("guide", layer="docs", distance=0.05),
        row("test", layer="C0_TEST_CHUNKS", path="tests/test_a.py", distance=0.1),
        row("source", layer="C0_SOURCE_CHUNKS", path="a.py", distance=0.3),
    ]
    hits, structured = order(req("как устроена погода", ordering="contract"), vector, [])
    assert structured
    assert [h.doc_id for h in hits] == ["source", "guide", "test"]
    assert [h.layer_rank for h in hits] == sorted(h.layer_rank for h in hits)


def test_the_question_is_read_once_when_the_policy_is_built(monkeypatch):
    """What the question names is read when the policy is built; fusing, the structural check, the
    re-score and the named files' check read the policy, never the question again."""
    question = "the error in pkg/hooks.py when registering"
    policy = ranking.RankingPolicy.of(req(question), SETTINGS)
    reads: list[str] = []
    monkeypatch.setattr(structure, "named", lambda q: reads.append(q) or structure.Named())
    monkeypatch.setattr(structure, "question_words", lambda q: reads.append(q) or [])
    vector = [
        row("caller", layer="C0_SOURCE_CHUNKS", path="pkg/client.py", distance=0.1),
        row("hooks", layer="C0_SOURCE_CHUNKS", path="pkg/hooks.py", distance=0.2),
    ]
    hits, structured = policy.order(vector, [], [], 10, 50, 1.0)
    assert structured and hits[0].doc_id == "hooks" and policy.reads_named_files
    assert reads == []
    assert policy.named.files == ("pkg/hooks.py",) and policy.fusion(vector) == policy.code


def test_the_code_or_prose_fusion_is_decided_from_the_question_and_the_candidates():
    prose = ranking.RankingPolicy.of(req("как устроена погода"), Settings(fusion_method="convex"))
    assert not prose.names_code and prose.fusion([row("a")]) == prose.prose
    assert prose.fusion([row("a"), row("b", layer="C0_SOURCE_CHUNKS")]) == prose.code
    assert prose.fusion([row("a", metadata={"related_code": ["a.py"]})]) == prose.code
    code = ranking.RankingPolicy.of(req("where is register_hook defined?"), Settings())
    assert code.names_code and code.fusion([row("a")]) == code.code


def test_the_policy_is_frozen_and_an_evaluation_replaces_its_weights():
    question = "the error in pkg/hooks.py when registering"
    policy = ranking.RankingPolicy.of(req(question), SETTINGS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.weights = structure.Weights()  # type: ignore[misc]
    vector = [
        row("caller", layer="C0_SOURCE_CHUNKS", path="pkg/client.py", distance=0.1),
        row("hooks", layer="C0_SOURCE_CHUNKS", path="pkg/hooks.py", distance=0.2),
    ]
    unweighted = dataclasses.replace(policy, weights=structure.Weights())
    assert [h.doc_id for h in unweighted.order(vector, [], [], 10, 50, 1.0)[0]] == ["caller", "hooks"]
    assert [h.doc_id for h in policy.order(vector, [], [], 10, 50, 1.0)[0]] == ["hooks", "caller"]


def test_a_hit_s_similarity_is_standardised_against_the_question_s_background():
    """``vector_z``: the hit's similarity against the vector list's places past the tenth (the
    question's neighbourhood in the scope). Shifting every cosine (an embedder or a genre whose
    cosines run higher) leaves it unchanged; too short a list has no background (None)."""

    def listed(shift: float, n: int = 30) -> list[dict]:
        return [
            row(f"d{i}", distance=round(0.1 - shift + (0.0 if i == 0 else 0.05 + 0.002 * i), 6))
            for i in range(n)
        ]

    low, _ = order(req("как устроена погода"), listed(0.0), [], limit=3)
    high, _ = order(req("как устроена погода"), listed(0.05), [], limit=3)
    assert low[0].doc_id == "d0" and low[0].vector_z is not None and low[0].vector_z > 5
    assert [h.vector_z for h in low] == pytest.approx([h.vector_z for h in high], abs=1e-3)
    assert low[0].vector_z > low[1].vector_z > low[2].vector_z
    short, _ = order(req("как устроена погода"), listed(0.0, n=15), [], limit=3)
    assert all(h.vector_z is None for h in short)  # 5 places past the tenth: no background
    assert ranking.background(listed(0.0, n=15)) is None


@pytest.mark.parametrize(
    ("layer", "listed"), [("docs", False), ("C0_SOURCE_CHUNKS", True), ("C1_SYMBOLS", True)]
)
def test_the_file_list_s_leads_are_read_only_where_a_candidate_is_code(layer, listed):
    """A prose search lists no files (file_rank.response_files), so its search does not re-score the
    lexical list for a file order nobody reads; a code search hands both lists' first files over,
    the lexical list's in the order a lexical search gives it."""
    policy = ranking.RankingPolicy.of(req("where is register_hook defined"), SETTINGS)
    vector = vector_list("a", "b", layer=layer)
    lexical = lexical_list("b", "c", layer=layer)
    leads = policy.leads(vector, lexical)
    assert bool(leads) is listed
    if listed:
        assert [[h.doc_id for h in lead] for lead in leads] == [["a", "b"], ["b", "c"]]
