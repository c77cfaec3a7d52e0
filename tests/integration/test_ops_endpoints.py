"""Operations endpoints on the embedded stack: a prefork query pool started like ``ragline up``, its
multiprocess metrics served on 127.0.0.1 behind basic auth, ``ragline metrics``, and Flower."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from ragline.shared.sdk.names import POOLS, TASK_QUERY_RETRIEVE
from tests.pools import free_port_run, listen_addresses, start_pool, wait_port, wait_ready

pytestmark = pytest.mark.slow


@pytest.fixture()
def ops_settings(stack, monkeypatch):
    from ragline.shared.config.settings import get_settings, reset_settings
    from ragline.shared.stack.services import free_port

    monkeypatch.setenv("RAGLINE_OPS_METRICS_PORT", str(free_port_run(len(POOLS))))
    monkeypatch.setenv("RAGLINE_FLOWER_PORT", str(free_port()))
    monkeypatch.setenv("RAGLINE_OPS_METRICS_PASSWORD", "m-pass-ops")
    monkeypatch.setenv("RAGLINE_FLOWER_PASSWORD", "f-pass-ops")
    reset_settings()
    yield get_settings()
    monkeypatch.undo()
    reset_settings()


def _scrape(url: str, auth: tuple[str, str] | None) -> httpx.Response:
    return httpx.get(url, auth=auth, timeout=5)


def test_query_pool_metrics_served_with_auth_and_snapshot(ops_settings, tenant):
    from ragline.cli.ops import summarize
    from ragline.shared.worker.celery_app import app
    from ragline.shared.worker.metrics_server import metrics_dir, metrics_port, reset_dir

    s = ops_settings
    reset_dir(metrics_dir(s, "query"))
    worker = start_pool(s, "query", concurrency=2)
    server = start_pool(s, "query", spec_name="metrics-query")
    try:
        wait_ready(app, worker)
        port = metrics_port(s, "query")
        wait_port("127.0.0.1", port)
        for i in range(3):  # lexical mode: no embedder needed in the children
            res = app.send_task(
                TASK_QUERY_RETRIEVE,
                args=[{"query": f"очередь {i}", "tenant": tenant, "groups": ["g"], "mode": "lexical"}],
                queue=worker.queue,
            ).get(timeout=60)
            assert res["hits"] == []
        url = f"http://127.0.0.1:{port}/metrics"
        assert _scrape(url, None).status_code == 401
        assert _scrape(url, ("metrics", "wrong")).status_code == 401
        body = _scrape(url, ("metrics", "m-pass-ops")).text
        assert 'rag_retrieval_latency_ms_count{mode="lexical"} 3.0' in body
        assert "rag_retrieved_chunks_count 3.0" in body
        assert 'rag_queue_depth{queue="query"}' in body
        # the pool's process(es) wrote multiprocess files; the endpoint sums them
        assert len(list(metrics_dir(s, "query").glob("histogram_*.db"))) >= 1
        assert listen_addresses(server.pid) == {"127.0.0.1"}

        rows = summarize(s)
        lat = [r for r in rows if r["metric"] == "rag_retrieval_latency_ms" and r["pool"] == "query"]
        assert lat and lat[0]["count"] == 3 and lat[0]["mean"] > 0
        assert any(r["metric"] == "rag_queue_depth" and r["labels"] == {"queue": "ingest"} for r in rows)

        from typer.testing import CliRunner

        from ragline.cli import app as cli

        out = CliRunner().invoke(cli, ["metrics", "--json"])
        assert out.exit_code == 0, out.output
        cli_rows = json.loads(out.stdout)
        assert any(r["metric"] == "rag_retrieval_latency_ms" and r["count"] == 3 for r in cli_rows)
    finally:
        server.stop()
        worker.stop()


def test_flower_binds_localhost_requires_password_and_sees_workers(ops_settings):
    s = ops_settings
    worker = start_pool(s, "control")
    flower = start_pool(s, "flower", spec_name="flower", queue="flower")
    try:
        wait_port("127.0.0.1", s.flower.port, timeout=60)
        base = f"http://127.0.0.1:{s.flower.port}"
        assert httpx.get(base + "/", timeout=5).status_code == 401
        assert httpx.get(base + "/", auth=("admin", "nope"), timeout=5).status_code == 401
        deadline = time.monotonic() + 60
        while True:  # Flower asks the workers over the broker: the running control worker answers
            r = httpx.get(base + "/api/workers?refresh=1", auth=("admin", "f-pass-ops"), timeout=20)
            seen = set(r.json()) if r.status_code == 200 else set()
            if any(n.startswith(worker.queue + "@") for n in seen) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert r.status_code == 200
        assert any(n.startswith(worker.queue + "@") for n in seen), seen
        assert listen_addresses(flower.pid) == {"127.0.0.1"}
        assert "f-pass-ops" not in flower.log_text()
    finally:
        flower.stop()
        worker.stop()
