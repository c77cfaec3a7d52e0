"""`ragline eval` and `ragline search` as a user runs them, against the in-process worker: a tiny corpus
through the real ingest pipeline (voyage embedder on loopback), every query through the retrieval task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragline.shared.worker import db
from tests.integration.query_corpus import store_docs
from tests.loopback import LoopbackServer

RAGLINE = [sys.executable, "-m", "ragline.cli"]
REPO = Path(__file__).resolve().parents[2]

CORPUS = [
    {"id": "cats", "title": "Кошки", "text": "Кошки спят шестнадцать часов в сутки и охотятся ночью."},
    {"id": "rust", "title": "", "text": "Ржавчина появляется на железе от влаги и кислорода."},
    {"id": "tea", "title": "", "text": "Зелёный чай заваривают водой около восьмидесяти градусов."},
    {"id": "moon", "title": "", "text": "Луна обращается вокруг Земли примерно за двадцать семь суток."},
]
QUERIES = [
    {"query": "сколько часов спят кошки", "relevant": {"cats": 2}},
    {"query": "откуда берётся ржавчина на железе", "relevant": ["rust"]},
    {"query": "температура воды для зелёного чая", "relevant": {"tea": 1, "cats": 0}},
    {"query": "квантовая хромодинамика", "relevant": ["moon"]},
]


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*RAGLINE, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def eval_tenants() -> int:
    with db.connection() as c:
        return c.execute(
            "SELECT count(DISTINCT tenant) AS n FROM documents WHERE tenant LIKE 'eval-%%'"
        ).fetchone()["n"]


@pytest.mark.slow
def test_eval_command_reports_every_mode(celery_worker, use_settings, tmp_path):
    corpus, queries = tmp_path / "corpus.jsonl", tmp_path / "queries.jsonl"
    corpus.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in CORPUS) + "\n", encoding="utf-8")
    queries.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in QUERIES) + "\n", encoding="utf-8")
    before = eval_tenants()
    with LoopbackServer() as srv:
        use_settings(
            embed_provider="voyage", providers_voyage_api_key="test-key", providers_voyage_base_url=srv.url
        )
        out = run(
            "eval",
            str(queries),
            "--corpus",
            str(corpus),
            "--mode",
            "all",
            "--k",
            "10",
            "--json",
            "--out",
            str(tmp_path / "full.json"),
        )
        assert out.returncode == 0, out.stderr
        assert srv.stats.texts_embedded >= 4  # the corpus went through the embedder of the pipeline
    res = json.loads(out.stdout)
    assert set(res) == {"vector", "lexical", "hybrid"}
    for mode, r in res.items():
        assert {"recall@10", "mrr@10", "ndcg@10", "fail@20", "n"} <= set(r), mode
        assert r["n"] == 4 and all(
            0.0 <= r[key] <= 1.0 for key in ("recall@10", "mrr@10", "ndcg@10", "fail@20")
        )
    lex = res["lexical"]
    # the three answerable questions share stems with their document and no other; the fourth has no match
    assert lex["recall@10"] == pytest.approx(0.75) and lex["mrr@10"] == pytest.approx(0.75)
    assert lex["fail@20"] == pytest.approx(0.25)
    assert [m["query"] for m in lex["misses"]] == ["квантовая хромодинамика"]
    # vector search ranks all four documents, so every relevant one is within the top 20
    assert res["vector"]["fail@20"] == 0.0 and res["vector"]["recall@10"] == 1.0
    full = json.loads((tmp_path / "full.json").read_text())
    assert full["meta"]["ingest"]["documents"] == 4 and full["meta"]["ingest"]["failed"] == 0
    assert eval_tenants() == before  # the isolated tenant is dropped afterwards


def test_search_cli_json_shape(celery_worker, conn, tenant):
    store_docs(conn, tenant, [{"doc_id": "q.md", "heading": "Очереди", "content": "очереди ingest и query"}])
    out = run(
        "search",
        "очереди",
        "--tenant",
        tenant,
        "--groups",
        "g,x",
        "--mode",
        "lexical",
        "--k",
        "3",
        "--json",
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert set(res) >= {"hits", "degraded", "timings_ms"}
    hit = res["hits"][0]
    assert {"doc_id", "chunk_no", "heading", "score", "content"} <= set(hit)
    assert hit["doc_id"] == "q.md" and hit["heading"] == "Очереди" and res["degraded"] is False
    # an unknown mode is a usage error caught before anything is sent
    bad = run(
        "search", "очереди", "--tenant", tenant, "--groups", "g", "--mode", "nonsense", "--json", timeout=120
    )
    assert bad.returncode == 2 and "nonsense" in bad.stderr and not bad.stdout
    # what only the worker's contract can refuse comes back as a structured error, exit 1
    bad = run("search", "очереди", "--tenant", tenant, "--groups", "g", "--k", "0", "--json", timeout=120)
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"] == "invalid payload"
