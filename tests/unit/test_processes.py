"""What ``ragline up`` starts for the query pool: one threads process, or a solo process per question."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ragline.shared.config.settings import Settings
from ragline.shared.stack import processes


def _settings(tmp_path: Path, **kw) -> Settings:
    return Settings(services_home=tmp_path, **kw)


def _worker_specs(s: Settings) -> dict[str, processes.ProcSpec]:
    """What each worker process of ``ragline up`` runs: its ``ragline worker POOL --index I --siblings N``
    resolved to the celery command line and environment that command executes."""
    out = {}
    for spec in processes.specs(s):
        if spec.name.startswith("worker-"):
            assert spec.argv[1:4] == ["-m", "ragline.cli", "worker"]
            pool, opts = spec.argv[4], dict(zip(spec.argv[5::2], spec.argv[6::2], strict=True))
            runs = processes.worker_command(s, pool, int(opts["--index"]), int(opts["--siblings"]))
            assert runs.name == spec.name
            out[spec.name] = runs
    return out


@pytest.mark.parametrize(
    ("embedder", "reranker", "expected"),
    [
        ("local-e5", "none", "threads"),  # one shared in-process model, every core per query
        ("voyage", "none", "solo"),
        ("ollama", "none", "solo"),  # the model runs in the Ollama server, not in the worker
        ("voyage", "cross-encoder", "threads"),
    ],
)
def test_auto_query_pool_follows_where_the_model_runs(tmp_path, embedder, reranker, expected):
    assert (
        _settings(tmp_path, embed_provider=embedder, rerank_provider=reranker).effective_query_pool
        == expected
    )
    explicit = _settings(
        tmp_path, embed_provider=embedder, rerank_provider=reranker, workers_query_pool="prefork"
    )
    assert explicit.effective_query_pool == "prefork"


def test_solo_query_pool_is_one_process_per_concurrent_question(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    s = _settings(tmp_path, workers_query_pool="solo", workers_query_concurrency=3)
    specs = _worker_specs(s)
    names = processes.pool_process_names(s, "query")
    assert names == ["worker-query", "worker-query-2", "worker-query-3"]
    nodes = [specs[n].argv[specs[n].argv.index("-n") + 1] for n in names]
    assert nodes == ["query@%h", "query-2@%h", "query-3@%h"]  # distinct node names for ping and Flower
    for n in names:
        argv = specs[n].argv
        assert argv[argv.index("--pool") + 1] == "solo" and "-c" not in argv
        assert argv[argv.index("-Q") + 1] == "query"
        # the processes share the cores: one OpenMP team each, never all cores each
        assert specs[n].env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 3))
    assert "metrics-query" in {spec.name for spec in processes.specs(s)}  # one endpoint per pool
    assert processes.pool_process_names(s, "ingest") == ["worker-ingest"]


def test_threads_query_pool_is_one_process(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    s = _settings(tmp_path, workers_query_pool="threads", workers_query_concurrency=3)
    assert processes.pool_process_names(s, "query") == ["worker-query"]
    spec = _worker_specs(s)["worker-query"]
    assert (
        spec.argv[spec.argv.index("-c") + 1] == "3" and spec.argv[spec.argv.index("--pool") + 1] == "threads"
    )
    assert spec.env["OMP_NUM_THREADS"] == str(os.cpu_count() or 1)
