"""A worker started with a deprecated variable says so in its log: one warning line per variable,
by name, never with the value (Python hides the DeprecationWarning, so the log is what an operator
sees). A real control worker, started as ``ragline up`` starts it."""

from __future__ import annotations

import json

import pytest

from tests.pools import start_pool, wait_ready

pytestmark = pytest.mark.slow


def test_a_worker_logs_each_deprecated_variable_once_without_its_value(stack):
    from ragline.shared.worker.celery_app import app

    env = {
        "RAGLINE_WORKER_WARMUP": "false",  # old name of workers.warmup
        "RAGLINE_METRICS_PASSWORD": "old-name-metrics-pw-7f3a",  # old name of a secret
        "RAGLINE_OPS_LOG_JSON": "true",
    }
    worker = start_pool(stack, "control", env=env)
    try:
        wait_ready(app, worker)
    finally:
        worker.stop()
    text = worker.log_text()
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    notices = sorted(
        (r["variable"], r["replacement"], r["level"])
        for r in records
        if r.get("logger") == "ragline.settings"
    )
    assert notices == [
        ("RAGLINE_METRICS_PASSWORD", "RAGLINE_OPS_METRICS_PASSWORD", "warning"),
        ("RAGLINE_WORKER_WARMUP", "RAGLINE_WORKERS_WARMUP", "warning"),
    ]
    assert "old-name-metrics-pw-7f3a" not in text
