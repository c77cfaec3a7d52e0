"""Structural ranking of code hits (query/retrieval/structure.py), the test globs of the SQL penalty, and the
file-level metrics of the code evaluation (ragline/operations/eval_code.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from ragline.ingest.layers import LayerRules
from ragline.operations import code_ablations
from ragline.operations.eval_code import (
    Snapshot,
    accuracy_at,
    file_ranking,
    ingest_config_key,
    read_code_queries,
    recall_at_k,
    reciprocal_rank,
    snapshot_tenant,
)
from ragline.query.retrieval import structure
from ragline.query.retrieval.filters import DEFAULT_TESTS_LAYER, glob_pattern
from ragline.query.retrieval.fusion import FusionPolicy
from ragline.query.retrieval.ranking import PathPreferences, RankingPolicy
from ragline.shared.config.settings import CodeSettings, Settings
from ragline.shared.sdk.contracts import Hit, SearchRequest
from ragline.shared.worker.identifiers import STOP_WORDS, component_parts

TRACEBACK = """Session.request fails with a unicode method
Traceback (most recent call last):
  File "C:\\Python27\\lib\\site-packages\\requests\\sessions.py", line 335, in request
    resp = self.send(prep, **send_kwargs)
Calling `register_hook()` in models.py, see HTTPAdapter.send, getUserName, requests.utils and e.g. this."""


def hit(path, score, symbols=(), content="", layer="C0_SOURCE_CHUNKS", **kw) -> Hit:
    meta = {"symbols": list(symbols), **kw.pop("metadata", {})}
    return Hit(
        doc_id=path, chunk_no=0, path=path, layer=layer, score=score, content=content, metadata=meta, **kw
    )


def settings(**code) -> Settings:
    return Settings().model_copy(update={"code": CodeSettings().model_copy(update=code)})


def rescore(hits, question, w, s=None):
    """The structural re-score of a search for ``question`` with the weights ``w``."""
    policy = replace(RankingPolicy.for_question(question, s or settings(), structural=True), weights=w)
    return policy.restructured(hits)


def signals(hits, question, ranks=None):
    return structure.signals(hits, structure.named(question), structure.question_words(question), ranks or {})


def structural(req, vector, lexical, s):
    return RankingPolicy.of(req, s).restructures(vector, lexical)


# --------------------------------------------------------------------------------- what is named
def test_named_finds_paths_tracebacks_and_code_identifiers_not_prose():
    n = structure.named(TRACEBACK)
    assert n.files == ("python27/lib/site-packages/requests/sessions.py", "models.py")
    assert set(n.identifiers) == {
        "Session.request",
        "register_hook",
        "HTTPAdapter.send",
        "getUserName",
        "requests.utils",
        "request",  # the traceback frame's function
        "send",  # its code line: self.send(...)
        "send_kwargs",
    }
    assert structure.named("Where are permissions synced without re-embedding?") == structure.Named()
    assert structure.named("What is i.e. or e.g. in the Session docs?") == structure.Named()


@pytest.mark.parametrize(
    ("named", "path", "score"),
    [
        ("requests/sessions.py", "requests/requests/sessions.py", 1.0),
        ("python27/lib/site-packages/requests/sessions.py", "requests/requests/sessions.py", 1.0),
        ("sessions.py", "requests/requests/sessions.py", 0.5),
        ("flask/sessions.py", "requests/requests/sessions.py", 0.5),
        ("models.py", "requests/requests/sessions.py", 0.0),
    ],
)
def test_file_match(named, path, score):
    assert structure.file_match(named, path) == score


# ------------------------------------------------------------------------------------- signals
def test_a_named_file_is_lifted_by_the_file_bonus():
    w = structure.Weights(file=0.004)
    hits = [
        hit("r/requests/api.py", 0.0160, ["request"], "def request(method, url): return session.request()"),
        hit("r/requests/hooks.py", 0.0158, ["dispatch_hook"], "hooks = register_hook(x)"),
        hit("r/requests/models.py", 0.0150, ["Request.register_hook"], "def register_hook(self): ..."),
    ]
    q = "register_hook() in requests/models.py does not accept a list"
    out = rescore(hits, q, w)
    assert [h.path for h in out] == ["r/requests/models.py", "r/requests/api.py", "r/requests/hooks.py"]
    assert out[0].structural_score == pytest.approx(0.004) and out[0].score == pytest.approx(0.019)
    # the file named by a traceback: half for a bare file name, whole for a path
    sig = signals(hits, 'File "/x/site-packages/requests/api.py", line 3 and models.py')
    assert [s.file for s in sig] == [1.0, 0.0, 0.5]


def test_dotted_module_names_name_their_file():
    hits = [hit("r/requests/utils.py", 0.01), hit("r/requests/models.py", 0.02)]
    sig = signals(hits, "requests.utils.get_netrc_auth breaks")
    assert [s.file for s in sig] == [1.0, 0.0]


@pytest.mark.parametrize(
    ("question", "modules"),
    [
        ("requests.utils.get_netrc_auth breaks", ("requests/utils", "requests/utils/get_netrc_auth")),
        ("See astropy.units.Quantity.to", ("astropy/units",)),
        # a format name is a module as well as a file name; one-letter aliases and hosts are none
        ('tbl.write(format="ascii.rst") with u.nm from docs.astropy.org', ("ascii/rst",)),
        ("Table.read of card.py", ()),
    ],
)
def test_dotted_names_spell_their_modules(question, modules):
    named = structure.named(question)
    assert [m for m in named.modules if not m.startswith("tbl/")] == list(modules)


def test_a_dotted_module_names_its_file_in_the_one_reading_of_named_files():
    named = structure.named('write(format="ascii.rst") drops a row')
    assert structure.path_named(named, "astropy/io/ascii/rst.py") == 1.0
    assert structure.path_named(named, "astropy/io/ascii/core.py") == 0.0
    assert (
        structure.path_named(structure.named("see astropy/io/fits/card.py"), "astropy/io/fits/card.py") == 1.0
    )


def test_related_code_of_a_document_among_the_candidates_lifts_that_file():
    doc = hit("repo/docs/retrieval.md", 0.013, layer="docs", metadata={"related_code": ["src/rag/query.py"]})
    code = hit("repo/src/rag/query.py", 0.010, ["build"])
    other = hit("repo/src/rag/other.py", 0.012, ["other"])
    out = rescore([doc, other, code], "how is the query built", structure.Weights(related=0.004))
    assert [h.path for h in out] == [
        "repo/src/rag/query.py",
        "repo/docs/retrieval.md",
        "repo/src/rag/other.py",
    ]


def test_layers_rank_by_role_under_the_names_the_settings_give_them():
    assert structure.layer_ranks(CodeSettings()) == {
        "C0_SOURCE_CHUNKS": 0,
        "C1_SYMBOLS": 1,
        "docs": 2,
        "C0_TEST_CHUNKS": 3,
    }
    renamed = CodeSettings(source_layer="SRC", symbols_layer="MAP", tests_layer="QA")
    ranks = structure.layer_ranks(renamed)
    assert ranks == {"SRC": 0, "MAP": 1, "docs": 2, "QA": 3}
    assert structure.layer_rank("wiki", ranks) == 4  # after every role's layer


def test_layer_ranks_order_only_the_contracts_order():
    hits = [hit("d/a.md", 0.0160, layer="docs"), hit("s/a.py", 0.0155, layer="SRC")]
    s = settings(source_layer="SRC")
    # the re-score reports each hit's layer rank and keeps the fused order: a layer is no bonus
    out = rescore(hits, "anything", structure.WEIGHTS, s)
    assert [(h.path, h.layer_rank) for h in out] == [("d/a.md", 2), ("s/a.py", 0)]
    contract = RankingPolicy.for_question("anything", s, structural=True, contract=True)
    assert [h.path for h in contract.restructured(hits)] == ["s/a.py", "d/a.md"]


def test_contract_order_is_lexicographic_over_the_seed_fields():
    s = settings()
    hits = [
        hit("r/docs/a.md", 0.02, layer="docs", lexical_rank=1, vector_distance=0.1),
        hit("r/tests/test_a.py", 0.02, layer="C0_TEST_CHUNKS", lexical_rank=1, test_penalty=0.005),
        hit("r/a.py", 0.01, ["f"], lexical_rank=None, vector_distance=0.2),
        hit("r/b.py", 0.01, ["g"], lexical_rank=3, vector_distance=0.5),
        hit("r/c.py", 0.01, ["c"], lexical_rank=3, vector_distance=0.4),
        hit("r/pref/x.md", 0.001, layer="docs", prefer_bonus=0.005, lexical_rank=9),
        hit("r/d.py", 0.01, ["apply_chunks"], lexical_rank=3, vector_distance=0.9),
    ]
    question = "where do the apply chunks live"
    out = structure.contract_order(
        hits,
        structure.named(question),
        structure.question_words(question),
        structure.Weights(spelled=0.004),
        structure.layer_ranks(s.code),
    )
    assert [h.path for h in out] == [
        "r/pref/x.md",  # prefer_bonus first, whatever its layer
        "r/d.py",  # same layer and lexical rank as b and c: it defines the name the question spells
        "r/c.py",  # then the smaller distance
        "r/b.py",
        "r/a.py",  # no lexical rank: after those with one
        "r/docs/a.md",  # layer 1
        "r/tests/test_a.py",  # penalised test
    ]


def test_ablations_cover_each_signal_alone_and_left_out():
    w = structure.Weights(file=0.004, related=0.002)
    out = code_ablations.ablations(w, grid=(0.001, 0.01))
    assert out["none"] == structure.Weights() and out["configured"] == w
    assert out["configured but file"] == structure.Weights(related=0.002)
    assert out["only file=0.01"] == structure.Weights(file=0.01)
    assert out["only named=0.625"] == structure.Weights(named=0.625)
    assert out["configured plus spelled=0.01"] == structure.Weights(file=0.004, related=0.002, spelled=0.01)
    assert len(out) == 2 + 2 + 2 + 4 * 2


def test_named_files_become_path_suffix_patterns():
    files = ("python27/lib/site-packages/requests/sessions.py", "models.py", "a_b/c%d.py")
    assert structure.named_file_patterns(files) == [
        "%/requests/sessions.py",
        "requests/sessions.py",
        "%/models.py",
        "%/a\\_b/c\\%d.py",
        "a\\_b/c\\%d.py",
    ]


def _rrf(vector_weight: float, lexical_weight: float) -> FusionPolicy:
    return FusionPolicy("rrf", rrf_k=60, vector_weight=vector_weight, lexical_weight=lexical_weight)


def test_named_files_join_the_candidates_as_a_third_list_and_can_be_refused():
    a = hit("r/a.py", 0.0164, vector_rank=1, fused_score=0.0164)
    b = hit("r/b.py", 0.0161, vector_rank=2, fused_score=0.0161)
    named_b = hit("r/b.py", 0.0, vector_rank=None)
    named_c = hit("r/c.py", 0.0, vector_rank=None)
    out = structure.with_named([a, b], [named_c, named_b], 0.5, FusionPolicy(rrf_k=60))
    assert [(h.path, h.named_rank) for h in out] == [("r/a.py", None), ("r/b.py", 2), ("r/c.py", 1)]
    assert out[1].score == pytest.approx(0.0161 + 0.5 / 62) and out[2].score == pytest.approx(0.5 / 61)
    # re-fused from the ranks: at weight 0 the named-only chunk drops out
    plain = code_ablations.refuse(out, structure.Weights(named=0.0), _rrf(1.0, 0.0))
    assert [(h.path, round(h.score, 6)) for h in plain] == [
        ("r/a.py", round(1 / 61, 6)),
        ("r/b.py", round(1 / 62, 6)),
    ]
    heavier = code_ablations.refuse(out, structure.Weights(named=2.0), _rrf(1.0, 0.0))
    assert [h.path for h in heavier] == ["r/b.py", "r/c.py", "r/a.py"]
    # a lexical list that ranks b first outweighs the vector list at equal weights
    lex = [h.model_copy(update={"lexical_rank": {"r/b.py": 1, "r/a.py": 5}.get(h.path)}) for h in out]
    both = code_ablations.refuse(lex, structure.Weights(), _rrf(1.0, 1.0))
    assert [h.path for h in both] == ["r/b.py", "r/a.py"]


def test_the_retrieval_hook_runs_only_when_it_can_change_something():
    s = settings()
    row = {"layer": "docs", "metadata": {}}
    plain = SearchRequest(query="How are tenants isolated?", tenant="t", groups=["g"])
    assert not structural(plain, [row], [row], s)
    assert structural(plain.model_copy(update={"query": "what does register_hook do"}), [row], [], s)
    assert not structural(
        plain.model_copy(update={"query": "register_hook", "structure": False}), [row], [], s
    )
    related = {"layer": "docs", "metadata": {"related_code": ["a.py"]}}
    assert structural(plain, [related], [], s)
    # the contract's order is asked for: applied whatever the settings say
    req = plain.model_copy(update={"ordering": "contract", "query": "g"})
    hits = [hit("r/docs/a.md", 0.02, layer="docs", lexical_rank=1), hit("r/a.py", 0.01, lexical_rank=2)]
    assert [h.path for h in RankingPolicy.of(req, s).restructured(hits)] == ["r/a.py", "r/docs/a.md"]


# ------------------------------------------------------------------- which rows are tests (one rule)
@pytest.mark.parametrize(
    ("path", "is_test"),
    [
        ("tests/test_models.py", True),
        ("test_requests.py", True),
        ("src/conftest.py", True),
        ("pkg/foo_test.go", True),
        ("requests/models.py", False),
        ("src/latest_news.py", False),
    ],
)
def test_the_test_penalty_falls_on_the_layer_ingestion_gives_test_files(path, is_test):
    """Search does not judge paths again: a row is a test when ingestion's layer rule stored it
    in the tests layer, and the penalty compares that layer, never the path."""
    code = CodeSettings()
    layer = LayerRules.from_settings(code).document(path, code=True, requested="docs")
    assert (layer == code.tests_layer) is is_test
    req = SearchRequest(query="q", tenant="t", groups=["g"], prefer_non_tests=True)
    paths = PathPreferences.of(req, Settings())
    assert paths.tests_layer == code.tests_layer == DEFAULT_TESTS_LAYER
    assert (paths.signals({"path": path, "layer": layer})["test_penalty"] > 0) is is_test
    assert paths.signals({"path": path, "layer": "docs"})["test_penalty"] == 0.0
    assert glob_pattern("a_b") == "a\\_b"


# -------------------------------------------------------------------------------- eval metrics
def test_file_level_metrics():
    hits = [
        {"path": "requests/requests/api.py"},
        {"path": "requests/requests/api.py"},
        {"path": "requests/requests/models.py"},
        {"path": "requests/docs/api.rst"},
    ]
    files = file_ranking(hits, "requests")
    assert files == ["requests/api.py", "requests/models.py", "docs/api.rst"]
    gold = ["requests/models.py", "docs/api.rst"]
    assert [accuracy_at(files, gold, k) for k in (1, 2, 3)] == [0.0, 0.0, 1.0]
    assert recall_at_k(files, gold, 2) == 0.5
    assert reciprocal_rank(files, gold) == 0.5
    assert reciprocal_rank(files, ["missing.py"]) == 0.0


def test_code_query_sets_read_both_shapes(tmp_path):
    rows = [
        {"instance_id": "a-1", "query": "q1", "bundle": "a.bundle", "ref": "a-1", "gold_files": ["x.py"]},
        {
            "id": "2",
            "query": "q2",
            "repo": str(tmp_path / "repo"),
            "ref": "main",
            "relevant": ["y.py", "y.py"],
        },
    ]
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    a, b = read_code_queries(path)
    assert (a.id, a.snapshot, a.relevant) == ("a-1", Snapshot(tmp_path / "a.bundle", "a-1"), ("x.py",))
    assert (b.snapshot.repo, b.relevant) == (tmp_path / "repo", ("y.py",))
    assert a.snapshot.name == "a"
    path.write_text(json.dumps({"query": "q", "relevant": ["d1"]}) + "\n")
    with pytest.raises(ValueError, match="needs 'repo'"):
        read_code_queries(path)
    key = ingest_config_key(["*.py"], [], Settings())
    assert key != ingest_config_key(["*.py", "*.md"], [], Settings())
    everything = Settings().model_copy(deep=True)
    everything.ingest.lexical_only_layers = []
    assert key != ingest_config_key(["*.py"], [], everything)  # the embedding budget decides the vectors
    assert snapshot_tenant(a.snapshot, "0123456789abcdef", key) == f"code-a-0123456789ab-{key}"


# ------------------------------------------------------------------------------ names spelled in words
DEFAULT_HEADERS_Q = (
    "Where are the default headers that every requests Session sends (User-Agent, Accept-Encoding) defined?"
)


@pytest.mark.parametrize(
    ("question", "symbol", "spelled"),
    [
        (DEFAULT_HEADERS_Q, "default_headers", True),
        (DEFAULT_HEADERS_Q, "utils.default_headers", True),  # the last dotted component is the name
        ("Where does the session resolve redirects?", "SessionRedirectMixin.resolve_redirects", True),
        ("Which adapter adds the proxy header?", "HTTPAdapter.proxy_headers", True),  # the plural
        ("How are the user agent string and headers built?", "defaultUserAgent", False),
        (DEFAULT_HEADERS_Q, "default_user_agent", False),  # "user agent" without "default" before it
        (DEFAULT_HEADERS_Q, "get_encoding_from_headers", False),
        ("Where is the session created?", "Session", False),  # one part: every file says it
        ("Where does it get all the items?", "get_all", False),  # stop words and short parts
        # a name written as code is named (the definition signal), not spelled in words
        ("Where is default_headers defined?", "default_headers", False),
        ("Why do defaultHeaders differ?", "default_headers", False),
    ],
)
def test_a_question_spells_a_name_with_its_parts_in_order(question, symbol, spelled):
    assert structure.spells(structure.question_words(question), symbol) is spelled


def test_a_definition_spelled_in_words_gets_the_spelled_bonus_its_mentions_do_not(monkeypatch):
    w = structure.Weights(spelled=0.006)
    hits = [
        hit("r/requests/sessions.py", 0.0180, ["Session.__init__"], "self.headers = default_headers()"),
        hit(
            "r/requests/utils.py", 0.0126, ["default_headers", "parse_header_links"], "def default_headers():"
        ),
        hit("r/requests/utils.py", 0.0125, ["default_user_agent"], "def default_user_agent():"),
    ]
    out = rescore(hits, DEFAULT_HEADERS_Q, w)
    assert [(h.path, h.metadata["symbols"][0]) for h in out][0] == ("r/requests/utils.py", "default_headers")
    assert [h.structural_score for h in out] == [pytest.approx(0.006), 0.0, 0.0]
    # the re-score runs for such a question only when a candidate defines the spelled name
    row = lambda symbols: {"metadata": {"symbols": symbols}, "layer": "C0_SOURCE_CHUNKS"}  # noqa: E731
    req = SearchRequest(query=DEFAULT_HEADERS_Q, tenant="t", groups=["g"])
    assert structure.WEIGHTS.spelled > 0  # the shipped weights spell names
    assert structural(req, [row(["Session.__init__"])], [row(["default_headers"])], settings())
    assert not structural(req, [row(["Session.__init__"])], [row(["default_user_agent"])], settings())
    monkeypatch.setattr(structure, "WEIGHTS", replace(structure.WEIGHTS, spelled=0.0))
    assert not structural(req, [], [row(["default_headers"])], settings())


_WORD = st.sampled_from(["default", "headers", "header", "proxy", "get", "netrc", "auth", "the", "s", ""])


@given(words=st.lists(_WORD, max_size=40), parts=st.lists(_WORD.filter(bool), min_size=1, max_size=4))
@examples(max_examples=400, deadline=None)
def test_a_name_is_spelled_by_any_run_of_consecutive_words_wherever_it_starts(words, parts):
    """spells finds the name's first part with list.index rather than trying every window; it must
    answer as the definition says: some run of consecutive words is the name's parts, the last in
    the singular or the plural (for names of two or more parts that are no stop words)."""
    symbol = "_".join(parts)
    name = component_parts(symbol)
    runs = [
        words[i : i + len(name)]
        for i in range(len(words) - len(name) + 1)
        if words[i : i + len(name) - 1] == name[:-1]
    ]
    spelled = any(name[-1] in (run[-1], run[-1] + "s", run[-1].removesuffix("s")) for run in runs)
    counted = sum(1 for p in name if len(p) > 2 and p not in STOP_WORDS) >= 2
    assert structure.spells(tuple(words), symbol) is (spelled and counted)
