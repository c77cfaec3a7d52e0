"""`ragline eval QUESTIONS.jsonl --answers` as a user runs it (subprocesses), end to end: real documents
(two ru-docs files and one of ragline's own source files) ingested with `ragline ingest`, every question
asked through the ask task of the session's in-process worker, the per-kind table, the calibration and
the generation metrics computed; offline, and with a chat model (a loopback Anthropic server) answering
and judging.

Embedding goes through the ``voyage`` provider against the loopback server (hashed trigram vectors):
what is under test is the eval, not the model. The documents are from ../shared/datasets/ru-docs (see
its README): OWASP ASVS 4.0.3 in Russian (CC BY-SA, © The OWASP Foundation) and the Vue.js 3
documentation in Russian (CC BY 4.0, © Yuxi (Evan) You and contributors).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ragline.operations import eval_answers as ev
from ragline.query.answer.prompt import JUDGE_PROMPT
from tests.conftest import DATASETS, REPO
from tests.loopback import LoopbackServer

RU_DOCS = DATASETS / "ru-docs"
SCORE_PY = DATASETS / "answers-dev" / "score.py"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not RU_DOCS.is_dir(), reason="ru-docs dataset not present"),
]
SOURCE = "tiny"
FILES = {
    "owasp-asvs-4.0.3-ru/md/0x11-V2-Authentication.md": "0x11-V2-Authentication.md",
    "vue3-docs-ru/guide/built-ins/teleport.md": "teleport.md",
}
KINDS = ["definition", "howto", "code-where", "crosslingual", "unanswerable"]


def _cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ragline.cli", *args],
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _rrf_lines() -> list[int]:
    """The lines of ``def rrf`` in query/retrieval/fusion.py (the code question's expected place)."""
    lines = (REPO / "query" / "retrieval" / "fusion.py").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines, 1) if line.startswith("def rrf("))
    return [start, start + 5]


def _questions() -> list[dict]:
    def q(qid, question, lang, kind, cite=(), facts=(), lines=None):
        return {
            "id": qid,
            "question": question,
            "lang": lang,
            "kind": kind,
            "answerable": kind != "unanswerable",
            "must_cite_any": [f"{SOURCE}/{c}" for c in cite],
            **({"must_cite_lines": {f"{SOURCE}/fusion.py": lines}} if lines else {}),
            "key_facts": [list(f) for f in facts],
        }

    return [
        q(
            "def",
            "Что такое Teleport во Vue?",
            "ru",
            "definition",
            ["teleport.md"],
            [["dom"], ["шаблон", "template"]],
        ),
        q(
            "howto",
            "Как хранить пароли пользователей по требованиям ASVS?",
            "ru",
            "howto",
            ["0x11-V2-Authentication.md"],
            [["соль", "соли", "salt"], ["хэш", "хеш", "hash"]],
        ),
        q(
            "code",
            "Where is the weighted reciprocal rank fusion rrf computed?",
            "en",
            "code-where",
            ["fusion.py"],
            [["rrf"]],
            _rrf_lines(),
        ),
        q(
            "xl",
            "What does the Teleport component do in Vue?",
            "en",
            "crosslingual",
            ["teleport.md"],
            [["dom"]],
        ),
        q("none", "Какая погода будет завтра на Марсе?", "ru", "unanswerable"),
    ]


@pytest.fixture()
def corpus(celery_worker, use_settings, tenant, tmp_path):
    """The three files ingested with `ragline ingest` under the loopback embedder; the tenant."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for src, name in FILES.items():
        shutil.copy(RU_DOCS / src, folder / name)
    shutil.copy(REPO / "query" / "retrieval" / "fusion.py", folder / "fusion.py")
    srv = LoopbackServer().start()
    try:
        # every question answered: the tests' hashed-trigram vectors are no embedder the confidence
        # model is fitted for, and what is under test is the eval, not the refusal
        use_settings(
            embed_provider="voyage",
            providers_voyage_api_key="k",
            providers_voyage_base_url=srv.url + "/v1",
            answer_min_confidence=0.0,
        )
        out = _cli(
            "ingest", str(folder), "--tenant", tenant, "--acl", "eval", "--source", SOURCE, "--wait", "--json"
        )
        assert out.returncode == 0, out.stderr[-2000:]
        summary = json.loads(out.stdout)
        assert summary["documents"] == 3 and summary["failed"] == 0
        yield tenant, srv
    finally:
        srv.stop()


def _write_questions(tmp_path) -> tuple[list[dict], object]:
    questions = _questions()
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions), encoding="utf-8")
    return questions, path


def test_answer_eval_offline_end_to_end(corpus, tmp_path):
    tenant, _ = corpus
    questions, qpath = _write_questions(tmp_path)
    saved, full = tmp_path / "answers.jsonl", tmp_path / "full.json"
    args = ["eval", str(qpath), "--answers", "--tenant", tenant, "--groups", "eval"]
    out = _cli(*args, "--save-answers", str(saved), "--out", str(full), "--show-failures")
    assert out.returncode == 0, out.stderr[-3000:]
    # the tables: one row per kind, the calibration buckets
    for word in (*KINDS, "right", "conf-wrong", "ctx prec", "confidence", "[0.9,1]", "none"):
        assert word in out.stdout, word
    res = json.loads(full.read_text())
    assert list(res["by_kind"]) == KINDS
    for kind, s in res["by_kind"].items():
        assert s["n"] == 1 and s["errors"] == 0 and s["missing"] == 0, kind
        assert s["right"] + s["partial"] + s["wrong"] + s["no_answer"] == 1, kind
    rows = {r["id"]: r for r in res["questions"]}
    # every question was asked through the worker: a real response with its cost
    for r in rows.values():
        assert r["cost"]["generator_calls"] == 0  # extractive, offline judges
        assert r["cost"]["latency_ms"] > 0 and r["cost"]["server_ms"] is not None
    answered = [r for r in rows.values() if not r["no_answer"]]  # an honest refusal is right, not answered
    assert answered, rows
    for r in answered:
        m = r["metrics"]
        # the context was read back for the caller: the passages the generator quoted
        assert m["context_passages"] and m["faithfulness"]["structural"] == 1.0, r["id"]
        assert m["faithfulness"]["lexical"] is not None
    for qid in ("def", "howto", "code"):
        m = rows[qid]["metrics"]
        assert m["context_precision"]["labels"] is not None and m["context_recall"] is not None, qid
    # the lexical side finds the expected documents for the Russian questions and the identifier
    assert rows["def"]["cite_doc_ok"] and rows["howto"]["cite_doc_ok"] and rows["code"]["cite_doc_ok"], {
        k: (r["verdict"], r["cited"], r["reason"]) for k, r in rows.items()
    }
    assert rows["howto"]["metrics"]["context_precision"]["labels"] > 0
    t = res["total"]
    assert t["n"] == 5 and t["judge_calls"] == 0 and res["meta"]["judge"] == "offline"
    for key in ("faithfulness", "answer_relevance", "context_precision", "context_recall", "latency_ms_p50"):
        assert t[key] is not None, key
    assert sum(b["n"] for b in res["calibration"].values()) == len(answered)
    # the saved responses score the same again (and, where present, with the reference scorer)
    again = _cli(*args, "--responses", str(saved), "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["total"]["right"] == t["right"]
    if SCORE_PY.is_file():
        ref = subprocess.run(
            [sys.executable, str(SCORE_PY), str(qpath), str(saved), "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        ref_total = json.loads(ref.stdout)["total"]
        assert {k: t[k] for k in ref_total} == ref_total
    # a caller whose groups see nothing: every question is a no-answer, no context is read back
    blind = _cli("eval", str(qpath), "--answers", "--tenant", tenant, "--groups", "nobody", "--json")
    assert blind.returncode == 0, blind.stderr[-2000:]
    b = json.loads(blind.stdout)["total"]
    assert b["no_answer"] == 4 and b["right"] == 1 and b["context_precision"] is None


def test_answer_eval_with_a_chat_model_answering_and_judging(corpus, use_settings, tmp_path):
    _, embed_srv = corpus
    tenant = corpus[0]
    questions, qpath = _write_questions(tmp_path)

    def chat(body: dict) -> str:
        system = body.get("system")
        system = system[0]["text"] if isinstance(system, list) else str(system)
        if system == ev.RELEVANCE_PROMPT:
            return '{"relevance": 0.75}'
        if system == ev.CONTEXT_PROMPT:
            return '{"verdicts": [{"i": 1, "verdict": true}]}'
        if system == JUDGE_PROMPT:
            return '{"verdicts": [{"i": 1, "supported": false}]}'
        return "Ответ по первому документу [1]."

    with LoopbackServer(answer_fn=chat) as srv:
        use_settings(
            embed_provider="voyage",
            providers_voyage_api_key="k",
            providers_voyage_base_url=embed_srv.url + "/v1",
            answer_provider="anthropic",
            providers_anthropic_api_key="k",
            providers_anthropic_base_url=srv.url,
        )
        out = _cli(
            "eval",
            str(qpath),
            "--answers",
            "--tenant",
            tenant,
            "--groups",
            "eval",
            "--out",
            str(tmp_path / "r.json"),
        )
        bodies = list(srv.stats.bodies)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["meta"]["judge"] == "generator" and res["meta"]["generator"] == "anthropic"
    answered = [r for r in res["questions"] if r["verdict"] != "no_answer"]
    assert answered
    systems = [b["system"][0]["text"] if isinstance(b["system"], list) else b["system"] for b in bodies]
    assert systems.count(ev.RELEVANCE_PROMPT) == len(answered)
    for r in answered:
        m = r["metrics"]
        assert r["cost"]["generator_calls"] >= 1  # the answer came from the chat model
        assert m["answer_relevance"]["generator"] == 0.75 and m["faithfulness"]["generator"] == 0.0
        assert m["context_precision"]["generator"] == 1.0  # the one passage judged relevant is first
        assert not m["judge_errors"]
    t = res["total"]
    # the headline numbers are the chat model's where it judged
    assert t["answer_relevance"] == 0.75 and t["faithfulness"] == 0.0
    assert t["judge_calls"] >= 3 * len(answered) and t["generator_calls_mean"] >= 1


def test_answer_eval_over_a_corpus_it_ingests_into_a_fresh_tenant(celery_worker, use_settings, tmp_path):
    from ragline.shared.worker import db

    text = (RU_DOCS / "vue3-docs-ru/guide/built-ins/teleport.md").read_text(encoding="utf-8")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        json.dumps({"id": "teleport", "title": "Teleport", "text": text}, ensure_ascii=False) + "\n"
    )
    questions = [
        {
            "id": "def",
            "question": "Что такое Teleport во Vue?",
            "lang": "ru",
            "kind": "definition",
            "answerable": True,
            "must_cite_any": ["teleport"],
            "key_facts": [["dom"]],
        }
    ]
    qpath = tmp_path / "q.jsonl"
    qpath.write_text(json.dumps(questions[0], ensure_ascii=False) + "\n", encoding="utf-8")

    def eval_tenants() -> int:
        with db.connection() as c:
            return c.execute(
                "SELECT count(DISTINCT tenant) AS n FROM documents WHERE tenant LIKE 'eval-%%'"
            ).fetchone()["n"]

    before = eval_tenants()
    with LoopbackServer() as srv:
        # every question answered: the tests' hashed-trigram vectors are no embedder the confidence
        # model is fitted for, and what is under test is the eval, not the refusal
        use_settings(
            embed_provider="voyage",
            providers_voyage_api_key="k",
            providers_voyage_base_url=srv.url + "/v1",
            answer_min_confidence=0.0,
        )
        out = _cli("eval", str(qpath), "--answers", "--corpus", str(corpus), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout)
    assert list(res["by_kind"]) == ["definition"] and res["total"]["errors"] == 0
    assert res["total"]["cited_doc_pct"] == 100.0 and res["total"]["context_precision"] == 1.0
    assert eval_tenants() == before  # the fresh tenant is dropped afterwards
