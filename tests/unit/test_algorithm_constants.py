"""The algorithm's numbers that were settings in 0.1 and are constants next to their code in 0.2:
each old variable stops the process naming its constant, each constant holds the value 0.1
shipped, and the code reads the constant (set for a test, it changes what the code does)."""

from __future__ import annotations

import importlib
import os
import textwrap
from dataclasses import replace

import pytest

from ragline.ingest.chunk import code as code_chunker
from ragline.ingest.kinds import Code
from ragline.ingest.parse import parse_bytes
from ragline.query import plan as planning
from ragline.query import service
from ragline.query.answer import run
from ragline.query.retrieval.expand import Expansion
from ragline.shared.config.renamed import REMOVED
from ragline.shared.config.settings import RenamedVariables, Settings, reset_settings
from ragline.shared.sdk.contracts import AskRequest, Hit
from ragline.shared.worker import providers
from ragline.shared.worker.providers import Generation

#: old variable -> (module, constant), and the value 0.1 shipped as the setting's default
MOVED: dict[str, tuple[str, str, object]] = {
    "RAGLINE_RETRIEVAL_TOP_N": ("query/retrieval/search.py", "LIST_DEPTH", 50),
    "RAGLINE_RERANK_THRESHOLD": ("query/service.py", "RERANK_THRESHOLD", 0.0),
    "RAGLINE_CODE_MAX_CHARS": ("ingest/chunk/code.py", "MAX_CHARS", 1500),
    "RAGLINE_CODE_MIN_CHARS": ("ingest/chunk/code.py", "MIN_CHARS", 300),
    "RAGLINE_ANSWER_MIN_SCORE": ("query/plan.py", "MIN_SCORE", 0.0),
    "RAGLINE_ANSWER_EXPAND_HITS": ("query/retrieval/expand.py", "Expansion.hits", 3),
    "RAGLINE_ANSWER_EXPAND_CHUNKS": ("query/retrieval/expand.py", "Expansion.chunks", 6),
    "RAGLINE_ANSWER_AGENTIC_MAX_ROUNDS": ("query/answer/agentic.py", "BUDGET.max_rounds", 3),
    "RAGLINE_ANSWER_AGENTIC_MAX_SEARCHES": ("query/answer/agentic.py", "BUDGET.max_searches", 6),
    "RAGLINE_ANSWER_AGENTIC_MAX_EVIDENCE": ("query/answer/agentic.py", "BUDGET.max_evidence", 12),
    "RAGLINE_ANSWER_CONTEXT_MERGE": ("query/answer/run.py", "POLICY.merge", True),
    "RAGLINE_ANSWER_CONTEXT_REORDER": ("query/answer/run.py", "POLICY.reorder", True),
    "RAGLINE_ANSWER_SQUEEZE_MIN_TOKENS": ("query/answer/run.py", "POLICY.squeeze_min_tokens", 400),
    "RAGLINE_ANSWER_GROUNDING_MIN_SHARE": ("query/answer/run.py", "POLICY.grounding_min_share", 0.5),
    "RAGLINE_ANSWER_MAX_UNSUPPORTED_SHARE": ("query/answer/run.py", "POLICY.max_unsupported_share", 0.5),
}


@pytest.fixture()
def clean_env(monkeypatch, tmp_path):
    """No ragline variable of the caller's environment, no ``.env``, no cached settings."""
    for name in list(os.environ):
        if name.upper().startswith("RAGLINE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    reset_settings()
    yield
    reset_settings()


@pytest.mark.parametrize("variable", sorted(MOVED))
def test_the_old_variable_stops_the_process_naming_its_constant(clean_env, monkeypatch, variable):
    path, constant, _ = MOVED[variable]
    monkeypatch.setenv(variable, "1")
    with pytest.raises(RenamedVariables) as caught:
        Settings()
    said = f"now a constant: {path} {constant}"
    assert caught.value.renamed == [(variable, said)] and REMOVED[variable] == said
    assert f"{variable} is no longer read ({said}): unset it" in str(caught.value)
    group_field = variable.removeprefix("RAGLINE_").lower()
    assert group_field not in {f"{g}_{n}" for g, n, _ in Settings.iter_fields()}


@pytest.mark.parametrize("variable", sorted(MOVED))
def test_the_constant_holds_what_0_1_shipped(variable):
    path, constant, shipped = MOVED[variable]
    module = importlib.import_module("ragline." + path.removesuffix(".py").replace("/", "."))
    name, _, field = constant.partition(".")
    value = getattr(module, name)
    assert (getattr(value, field) if field else value) == shipped


# ------------------------------------------------------------------- the code reads the constant
def test_the_plan_keeps_hits_by_min_score_and_expands_by_the_expansions_sizes(monkeypatch):
    req = AskRequest(query="как устроен кэш", tenant="t", groups=["g"], k=3, expand="section")
    default = planning.build(req, Settings())
    assert default.min_score == planning.MIN_SCORE
    assert default.expansion == Expansion("section")
    monkeypatch.setattr(planning, "MIN_SCORE", 0.25)
    assert planning.build(req, Settings()).min_score == 0.25


class _Scores:
    """A reranker scoring the candidates 0.9, 0.4, 0.1 in their order."""

    name = "scripted"

    def rerank(self, query: str, documents: list[str], top_k: int) -> list[tuple[int, float]]:
        return [(i, s) for i, s in enumerate([0.9, 0.4, 0.1][: len(documents)])]


def test_a_rerank_drops_hits_below_the_threshold_constant_unless_the_request_sets_its_own(monkeypatch):
    monkeypatch.setattr(providers, "get_reranker", lambda: _Scores())
    hits = [Hit(doc_id=f"d{i}", chunk_no=0, content=f"text {i}", score=1.0 - i / 10) for i in range(3)]
    assert len(service.rerank_stage("q", hits, 3).hits) == 3  # 0: nothing Voyage-scaled is dropped
    monkeypatch.setattr(service, "RERANK_THRESHOLD", 0.5)
    assert [h.doc_id for h in service.rerank_stage("q", hits, 3).hits] == ["d0"]
    assert len(service.rerank_stage("q", hits, 3, threshold=0.0).hits) == 3


class _Chat:
    name = "anthropic"

    def generate(self, system: str, messages: list[dict], max_tokens: int | None = None) -> Generation:
        return Generation("Кэш хранит результат [1].", 10, 5)


def test_the_context_stage_merges_and_orders_by_the_answer_policy(monkeypatch):
    monkeypatch.setattr(providers, "get_generator", lambda: _Chat())
    settings = Settings(answer={"provider": "anthropic"})
    # two neighbouring chunks of one document, and a third document
    hits = [
        Hit(doc_id="a", chunk_no=0, content="Кэш хранит результат вычисления.", score=0.9),
        Hit(doc_id="a", chunk_no=1, content="Результат пересчитывается при изменении.", score=0.8),
        Hit(doc_id="b", chunk_no=0, content="Наблюдатели следят за данными.", score=0.7),
    ]
    merged = run.context_stage(run.QuestionRun.start("Что хранит кэш?", settings), hits)
    assert len(merged.passages) == 2
    monkeypatch.setattr(run, "POLICY", replace(run.POLICY, merge=False))
    apart = run.context_stage(run.QuestionRun.start("Что хранит кэш?", settings), hits)
    assert len(apart.passages) == 3


def test_a_source_file_is_chunked_by_the_chunkers_sizes(monkeypatch):
    source = "".join(
        textwrap.dedent(f'''
        def step_{i}(value):
            """Step {i} of the pipeline: adds {i} to the value and returns it."""
            return value + {i}
        ''')
        for i in range(12)
    )
    doc = parse_bytes(source.encode(), "python", "pkg/steps.py")
    merged = Code(doc).chunks(Settings())  # tiny neighbours merged up to MAX_CHARS
    monkeypatch.setattr(code_chunker, "MIN_CHARS", 0)
    apart = Code(doc).chunks(Settings())
    assert len(merged) < len(apart) == 12
