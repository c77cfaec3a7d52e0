"""The answer eval's scoring (ragline/operations/eval_answers.py) over constructed answers: every verdict, the
reference scorer's numbers (answers-dev/score.py run on the same responses), calibration, cost and
the generation metrics with their offline and chat-model judges."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ragline.operations import eval_answers as ev
from tests.conftest import DATASETS

SCORE_PY = DATASETS / "answers-dev" / "score.py"

DOC_Q = {
    "id": "d1",
    "question": "Как хранить пароли пользователей?",
    "lang": "ru",
    "kind": "howto",
    "answerable": True,
    "must_cite_any": ["asvs/0x11-V2-Authentication.md"],
    "key_facts": [["соль", "salt"], ["хэш", "хеш", "hash"], ["pbkdf2", "bcrypt"]],
}
CODE_Q = {
    "id": "c1",
    "question": "Where does requests follow redirects?",
    "lang": "en",
    "kind": "code-where",
    "answerable": True,
    "must_cite_any": ["requests/requests/sessions.py"],
    "must_cite_lines": {"requests/requests/sessions.py": [80, 140]},
    "key_facts": [["resolve_redirects"], ["301", "302"]],
}
NONE_Q = {
    "id": "u1",
    "question": "Что нового в ASVS 5.0?",
    "lang": "ru",
    "kind": "unanswerable",
    "answerable": False,
    "must_cite_any": [],
    "key_facts": [],
}


def cite(doc: str, n: int = 1, **kw) -> dict:
    return {"n": n, "doc_id": doc, "chunk_no": 0, **kw}


def resp(answer: str, citations: list[dict], confidence: float | None = 0.8, **kw) -> dict:
    return {"answer": answer, "citations": citations, "no_answer": False, "confidence": confidence, **kw}


NO_ANSWER = {"answer": "В базе знаний нет ответа на этот вопрос.", "citations": [], "no_answer": True}

#: (name, question, response or None, expected verdict, confident_wrong)
CASES = [
    (
        "right",
        DOC_Q,
        resp("Пароли хранят с солью [1], как хэш PBKDF2.", [cite("asvs/0x11-V2-Authentication.md")]),
        "right",
        False,
    ),
    (
        "right-ё-and-markers",
        DOC_Q,
        resp("Хэш[1] с солью[2]; ёмкость.", [cite("asvs/0x11-V2-Authentication.md")]),
        "right",
        False,
    ),
    (
        "partial: one fact of three",
        DOC_Q,
        resp("Пароли хранят с солью [1].", [cite("asvs/0x11-V2-Authentication.md")], 0.9),
        "partial",
        True,
    ),
    (
        "wrong: facts but another document",
        DOC_Q,
        resp("Соль и хэш PBKDF2 [1].", [cite("asvs/0x02-Preface.md")], 0.9),
        "wrong",
        True,
    ),
    (
        "wrong below the confident line",
        DOC_Q,
        resp("Соль и хэш PBKDF2 [1].", [cite("asvs/0x02-Preface.md")], 0.69),
        "wrong",
        False,
    ),
    ("no answer on an answerable question", DOC_Q, NO_ANSWER, "no_answer", False),
    ("error", DOC_Q, {"ok": False, "error": "timeout"}, "error", False),
    ("missing", DOC_Q, None, "error", False),
    (
        "code: right lines",
        CODE_Q,
        resp(
            "`resolve_redirects` follows 301 and 302 [1].",
            [cite("requests/requests/sessions.py", start_line=90, end_line=130)],
        ),
        "right",
        False,
    ),
    (
        "code: the locator's lines count",
        CODE_Q,
        resp(
            "`resolve_redirects` follows 301 [1].",
            [cite("requests/requests/sessions.py", locator="requests/requests/sessions.py:120-160")],
        ),
        "right",
        False,
    ),
    (
        "code: right file, other lines",
        CODE_Q,
        resp(
            "`resolve_redirects` follows 301 [1].",
            [cite("requests/requests/sessions.py", start_line=300, end_line=340)],
            0.95,
        ),
        "wrong",
        True,
    ),
    (
        "code: the place only in the citation",
        CODE_Q,
        resp(
            "It follows redirects [1].", [cite("requests/requests/sessions.py", start_line=80, end_line=90)]
        ),
        "partial",
        True,
    ),
    ("unanswerable: honest no answer", NONE_Q, NO_ANSWER, "right", False),
    (
        "unanswerable: answered",
        NONE_Q,
        resp("ASVS 4.0.3 [1].", [cite("asvs/0x02-Preface.md")], 1.0),
        "wrong",
        True,
    ),
]


@pytest.mark.parametrize(("name", "q", "response", "want", "confident"), CASES, ids=[c[0] for c in CASES])
def test_each_verdict(name, q, response, want, confident):
    r = ev.score_one(q, response)
    assert ev.verdict(r) == want, (name, r)
    assert r["confident_wrong"] is confident, (name, r)
    if want == "partial":
        assert r["partial"] and r["cited_ok"] and not r["right"]


def test_citation_correctness_separates_the_document_from_its_lines():
    wrong_lines = ev.score_one(CODE_Q, CASES[10][2])
    assert wrong_lines["cite_doc_ok"] is True and wrong_lines["cited_ok"] is False
    other_doc = ev.score_one(DOC_Q, CASES[3][2])
    assert other_doc["cite_doc_ok"] is False and other_doc["cited_ok"] is False
    res = ev.score([DOC_Q, CODE_Q], {"d1": CASES[0][2], "c1": CASES[10][2]})
    t = res["total"]
    assert t["cited_doc_pct"] == 100.0 and t["cited_ok_pct"] == 50.0 and t["cited_lines_pct"] == 0.0


def _rows_for_reference() -> tuple[list[dict], dict[str, dict]]:
    """Every case as a question of its own (ids made unique), and its response."""
    questions, answers = [], {}
    for i, (_name, q, response, _want, _c) in enumerate(CASES):
        qid = f"{q['id']}-{i}"
        questions.append({**q, "id": qid})
        if response is not None:
            answers[qid] = response
    return questions, answers


@pytest.mark.skipif(not SCORE_PY.is_file(), reason="answers-dev's score.py not present")
def test_numbers_equal_the_reference_scorer(tmp_path):
    questions, answers = _rows_for_reference()
    answers["stray"] = NO_ANSWER  # an id not in the set: both warn
    qf, af = tmp_path / "q.jsonl", tmp_path / "a.jsonl"
    qf.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions), encoding="utf-8")
    af.write_text(
        "".join(json.dumps({"id": k, "response": v}, ensure_ascii=False) + "\n" for k, v in answers.items()),
        encoding="utf-8",
    )
    out = subprocess.run(
        [sys.executable, str(SCORE_PY), str(qf), str(af), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    ref = json.loads(out.stdout)
    mine = ev.score(questions, ev.read_answers(af))
    reference_keys = list(ref["total"])
    assert {k: mine["total"][k] for k in reference_keys} == ref["total"]
    assert list(mine["by_kind"]) == list(ref["by_kind"])
    for kind, agg in ref["by_kind"].items():
        assert {k: mine["by_kind"][kind][k] for k in reference_keys} == agg, kind
    for lang, agg in ref["by_lang"].items():
        assert {k: mine["by_lang"][lang][k] for k in reference_keys} == agg, lang
    for a, b in zip(mine["questions"], ref["questions"], strict=True):
        assert {k: a[k] for k in b} == b
    assert mine["warnings"] == ref["warnings"]


def test_summaries_count_every_verdict_per_kind():
    questions, answers = _rows_for_reference()
    res = ev.score(questions, answers)
    per_kind = {
        k: {v: s[v] for v in ("right", "partial", "wrong", "no_answer")} for k, s in res["by_kind"].items()
    }
    assert per_kind == {
        "howto": {"right": 2, "partial": 1, "wrong": 2, "no_answer": 1},
        "code-where": {"right": 2, "partial": 1, "wrong": 1, "no_answer": 0},
        "unanswerable": {"right": 1, "partial": 0, "wrong": 1, "no_answer": 0},
    }
    assert res["by_kind"]["howto"]["errors"] == 1 and res["by_kind"]["howto"]["missing"] == 1
    assert res["by_kind"]["howto"]["failed"] == 2 and res["total"]["failed"] == 2
    assert res["total"]["confident_wrong"] == sum(c[4] for c in CASES)


def test_calibration_buckets_hold_the_answered_questions():
    questions, answers = _rows_for_reference()
    cal = ev.score(questions, answers)["calibration"]
    assert list(cal) == [
        "[0,0.2)",
        "[0.2,0.4)",
        "[0.4,0.6)",
        "[0.6,0.7)",
        "[0.7,0.8)",
        "[0.8,0.9)",
        "[0.9,1]",
        "none",
    ]
    # answered: five at 0.8 (four right, one partial); 0.9, 0.9, 0.95, 1.0 (none right); 0.69 (wrong)
    assert cal["[0.8,0.9)"] == {"n": 5, "right": 4, "right_share": 0.8}
    assert cal["[0.9,1]"] == {"n": 4, "right": 0, "right_share": 0.0}
    assert cal["[0.6,0.7)"] == {"n": 1, "right": 0, "right_share": 0.0}
    assert sum(b["n"] for b in cal.values()) == 10  # no-answers, errors and the missing line are not answers
    assert ev.bucket(0.7) == "[0.7,0.8)" and ev.bucket(1.0) == "[0.9,1]" and ev.bucket(None) == "none"


def test_generator_calls_are_read_from_the_trace():
    assert ev.generator_calls({"answer": "a", "trace": {"generator": {"generator": "extractive"}}}) == 0
    chat = {
        "answer": "a",
        "trace": {
            "generator": {"generator": "anthropic"},
            "self_consistency": {"extra_calls": 2},
            "grounding": {"judge": "generator"},
            "context": {"passages": [{"n": 1, "squeezed_tokens": 40}, {"n": 2}]},
            "queries": ["q", "q2", "q3"],
            "hyde": True,
        },
    }
    assert ev.generator_calls(chat) == 1 + 2 + 1 + 1 + 1 + 1
    failed = {
        "answer": "a",
        "degraded_reasons": ["generator: ProviderError", "grounding: ValueError: no verdict"],
        "trace": {"generator": {"generator": "extractive"}, "grounding": {"judge": "lexical"}},
    }
    assert ev.generator_calls(failed) == 2  # the failed answer call and the failed judge call
    agentic = {"answer": "a", "trace": {"generator": {"generator": "openai"}, "agentic": {"rounds": 3}}}
    assert ev.generator_calls(agentic) == 4
    # the router's rules decompose a comparison offline: no call; with a chat model, one for the sub-queries
    offline = {
        "answer": "a",
        "trace": {
            "generator": {"generator": "extractive"},
            "router": {"route": "decompose", "queries": ["v-if", "v-show"]},
            "queries": ["Чем v-if отличается от v-show?", "v-if", "v-show"],
        },
    }
    assert ev.generator_calls(offline) == 0
    routed = {"answer": "a", "trace": {**offline["trace"], "generator": {"generator": "anthropic"}}}
    assert ev.generator_calls(routed) == 2  # the sub-queries and the answer
    paraphrased = {"answer": "a", "trace": {**routed["trace"], "queries": [*routed["trace"]["queries"], "p"]}}
    assert ev.generator_calls(paraphrased) == 3  # and the multi-query transform
    # a trace that counts its own calls (a router, sub-searches) is taken at its word
    counted = {"answer": "a", "trace": {**agentic["trace"], "cost": {"generator_calls": 7}}}
    assert ev.generator_calls(counted) == 7


def test_cost_per_question_in_the_summary():
    r1 = resp("Соль и хэш [1].", [cite("asvs/0x11-V2-Authentication.md")], timings_ms={"total": 100.0})
    r2 = resp("Соль [1].", [cite("asvs/0x11-V2-Authentication.md")], timings_ms={"total": 300.0})
    q2 = {**DOC_Q, "id": "d2"}
    res = ev.score([DOC_Q, q2], {"d1": r1, "d2": r2}, latency_ms={"d1": 150.0})
    costs = [q["cost"] for q in res["questions"]]
    assert costs[0] == {"latency_ms": 150.0, "server_ms": 100.0, "generator_calls": 0}
    assert costs[1]["latency_ms"] == 300.0  # no client-side time: the worker's
    assert res["total"]["latency_ms_mean"] == 225.0 and res["total"]["generator_calls_mean"] == 0.0


# ------------------------------------------------------------------------------ generation metrics
PASSAGES = [
    ev.Passage(1, "asvs/0x02-Preface.md", "Стандарт ASVS описывает требования."),
    ev.Passage(2, "asvs/0x11-V2-Authentication.md", "Пароли хранят как хэш с солью, например PBKDF2."),
    ev.Passage(3, "asvs/0x11-V2-Authentication.md", "Длина пароля не меньше 12 символов."),
]


def test_average_precision_rewards_relevant_passages_first():
    assert ev.average_precision([True, True, False]) == 1.0
    assert ev.average_precision([False, True, True]) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert ev.average_precision([False, False]) == 0.0
    flags = [ev.passage_relevant(DOC_Q, p) for p in PASSAGES]
    assert flags == [False, True, True]


def test_passage_relevance_of_code_needs_the_lines():
    inside = ev.Passage(1, "requests/requests/sessions.py", "def resolve_redirects", 100, 150)
    outside = ev.Passage(2, "requests/requests/sessions.py", "def send", 300, 350)
    unknown = ev.Passage(3, "requests/requests/sessions.py", "def send")
    assert [ev.passage_relevant(CODE_Q, p) for p in (inside, outside, unknown)] == [True, False, False]


def test_context_recall_is_the_share_of_key_facts_in_the_context():
    assert ev.context_recall(DOC_Q, PASSAGES) == 1.0
    assert ev.context_recall(DOC_Q, PASSAGES[:1]) == 0.0
    assert ev.context_recall(DOC_Q, [ev.Passage(1, "x", "Нужна СОЛЬ.")]) == pytest.approx(0.333)
    assert ev.context_recall(NONE_Q, PASSAGES) is None


def test_the_ceiling_attributes_each_miss_to_the_search_or_the_answer():
    """Beside each verdict: were the key facts and an expected document in the first five hits?
    A miss with both there is the answer's, one without is the search's; totals per summary."""
    assert ev.ceiling(DOC_Q, PASSAGES) == {"ctx_facts": 1.0, "ctx_doc": True, "reachable": True}
    assert ev.ceiling(DOC_Q, PASSAGES[:1]) == {"ctx_facts": 0.0, "ctx_doc": False, "reachable": False}
    assert ev.ceiling(NONE_Q, PASSAGES)["reachable"] is True  # a refusal is always reachable
    assert ev.ceiling(DOC_Q, None)["reachable"] is None
    wrong = {
        "answer": "Стандарт ASVS описывает требования [1].",
        "no_answer": False,
        "confidence": 0.2,
        "citations": [{"doc_id": "asvs/0x02-Preface.md"}],
    }
    right = {
        "answer": "Хэш с солью, PBKDF2, от 12 символов [1].",
        "no_answer": False,
        "confidence": 0.9,
        "citations": [{"doc_id": "asvs/0x11-V2-Authentication.md"}],
    }
    other = {**DOC_Q, "id": "d2"}
    third = {**DOC_Q, "id": "d3"}
    res = ev.score(
        [DOC_Q, other, third],
        {"d1": wrong, "d2": wrong, "d3": right},
        passages={"d1": PASSAGES, "d2": PASSAGES[:1], "d3": PASSAGES},
    )
    misses = {r["id"]: r["miss"] for r in res["questions"]}
    assert misses == {"d1": "answer", "d2": "search", "d3": None}
    total = res["total"]
    assert (total["ceiling"], total["miss_search"], total["miss_answer"]) == (2, 1, 1)
    assert total["right_of_ceiling_pct"] == 50.0


def test_faithfulness_counts_unsupported_sentences():
    quoted = "Пароли хранят как хэш с солью, например PBKDF2 [2]."
    invented = "Пароли хранят в открытом виде на сервере Марса [3]."
    assert ev.faithfulness(quoted, PASSAGES, "structural") == 1.0
    assert ev.faithfulness(f"{quoted} {invented}", PASSAGES, "lexical") == 0.5
    assert ev.faithfulness(f"{quoted} {invented}", PASSAGES, "structural") == 0.5


def test_answer_relevance_offline():
    assert ev.answer_relevance_lexical("Как хранить пароли?", "Пароли хранить с солью [1].") == 1.0
    assert ev.answer_relevance_lexical("Как хранить пароли?", "Сессии истекают [1].") == 0.0
    # an English question answered in Russian shares no words by construction: not judged offline
    assert ev.answer_relevance_lexical("How to store passwords?", "Пароли хранят с солью [1].") is None


def test_generation_metrics_per_judge_offline_and_with_the_chat_model():
    answer = resp(
        "Пароли хранят как хэш с солью, например PBKDF2 [2].", [cite("asvs/0x11-V2-Authentication.md", 2)]
    )
    offline = ev.generation_metrics(DOC_Q, answer, PASSAGES)
    assert offline["faithfulness"] == {"structural": 1.0, "lexical": 1.0}
    assert offline["context_precision"] == {"labels": round((1 / 2 + 2 / 3) / 2, 3)}
    assert offline["context_recall"] == 1.0 and offline["judge_calls"] == 0
    asked: list[str] = []

    def chat(system: str, messages: list[dict]) -> str:
        asked.append(system)
        if system == ev.RELEVANCE_PROMPT:
            return 'Here: {"relevance": 0.9}'
        if system == ev.CONTEXT_PROMPT:
            return '{"verdicts": [{"i": 1, "verdict": false}, {"i": 2, "verdict": true}]}'
        return '{"verdicts": [{"i": 1, "supported": false}]}'  # the groundedness judge

    judged = ev.generation_metrics(DOC_Q, answer, PASSAGES, chat)
    assert judged["answer_relevance"]["generator"] == 0.9
    assert judged["context_precision"]["generator"] == 0.5  # passage 3 got no verdict: not relevant
    assert judged["faithfulness"]["generator"] == 0.0
    assert judged["judge_calls"] == 3 and len(asked) == 3 and not judged["judge_errors"]
    assert ev.headline(judged, "faithfulness") == 0.0 and ev.headline(offline, "faithfulness") == 1.0


def test_a_failing_judge_is_recorded_and_the_offline_metrics_stay():
    answer = resp(
        "Пароли хранят как хэш с солью, например PBKDF2 [2].", [cite("asvs/0x11-V2-Authentication.md", 2)]
    )
    m = ev.generation_metrics(DOC_Q, answer, PASSAGES, lambda s, msgs: "I cannot judge that.")
    assert m["answer_relevance"]["generator"] is None and m["faithfulness"]["generator"] is None
    assert len(m["judge_errors"]) == 3 and m["faithfulness"]["lexical"] == 1.0


def test_no_answer_and_unknown_context_have_no_metrics():
    m = ev.generation_metrics(DOC_Q, NO_ANSWER, [])
    assert m["faithfulness"] == {} and m["answer_relevance"] == {} and m["context_precision"] == {}
    m = ev.generation_metrics(DOC_Q, CASES[0][2], None)
    assert m["faithfulness"] == {} and m["context_recall"] is None and m["context_passages"] is None


def test_passages_from_the_trace_and_the_chunks():
    r = {
        "answer": "x",
        "trace": {
            "answer_documents": [
                {"n": 2, "doc_id": "b", "chunk_no": 4, "chunks": [4, 5]},
                {"n": 1, "doc_id": "a", "chunk_no": 0, "chunks": [0]},
            ]
        },
    }
    keys = ev.context_keys(r)
    chunks = {
        ("a", 0): {"content": "A", "start_line": None, "end_line": None},
        ("b", 4): {"content": "B4", "start_line": 10, "end_line": 20},
        ("b", 5): {"content": "B5", "start_line": 18, "end_line": 40},
    }
    assert ev.passages_from(keys, chunks) == [ev.Passage(1, "a", "A"), ev.Passage(2, "b", "B4\nB5", 10, 40)]
    # a chunk that is gone (or not visible to the caller) is left out
    assert ev.passages_from(keys, {("b", 5): chunks[("b", 5)]}) == [ev.Passage(2, "b", "B5", 18, 40)]


# ------------------------------------------------------------------------------ the command line
def _write(tmp_path, questions, answers):
    qf, af = tmp_path / "q.jsonl", tmp_path / "a.jsonl"
    qf.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions), encoding="utf-8")
    af.write_text(
        "".join(json.dumps({"id": k, "response": v}, ensure_ascii=False) + "\n" for k, v in answers.items()),
        encoding="utf-8",
    )
    return qf, af


def test_cli_scores_saved_responses_without_a_stack(tmp_path):
    questions, answers = _rows_for_reference()
    qf, af = _write(tmp_path, questions, answers)
    cli = [sys.executable, "-m", "ragline.cli", "eval", str(qf), "--answers", "--responses", str(af)]
    out = subprocess.run(
        [*cli, "--json", "--out", str(tmp_path / "full.json")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["total"] == ev.score(questions, answers)["total"]
    assert set(res["by_kind"]) == {"howto", "code-where", "unanswerable"}
    full = json.loads((tmp_path / "full.json").read_text())
    assert len(full["questions"]) == len(questions) and full["meta"]["judge"] == "offline"
    table = subprocess.run(
        [*cli, "--show-failures"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}
    )
    assert table.returncode == 0, table.stderr
    for kind in ("howto", "code-where", "unanswerable", "confidence", "[0.9,1]"):
        assert kind in table.stdout
    assert "cited the expected doc at other lines" in table.stdout and "CONFIDENT" in table.stdout
    some = subprocess.run([*cli, "--only", "code-where,u1-12", "--json"], capture_output=True, text=True)
    assert some.returncode == 0, some.stderr
    assert {k: s["n"] for k, s in json.loads(some.stdout)["by_kind"].items()} == {
        "code-where": 4,
        "unanswerable": 1,
    }


def test_cli_refuses_an_answer_eval_it_cannot_run(tmp_path):
    questions, answers = _rows_for_reference()
    qf, _ = _write(tmp_path, questions, answers)
    base = [sys.executable, "-m", "ragline.cli", "eval", str(qf), "--answers"]
    for extra, said in (
        ([], "--tenant"),
        (["--tenant", "t"], "--groups"),
        (["--tenant", "t", "--groups", "g", "--mode", "all"], "one mode"),
    ):
        out = subprocess.run([*base, *extra], capture_output=True, text=True)
        assert out.returncode == 2 and said in out.stderr, (extra, out.stderr)
