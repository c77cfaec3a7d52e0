"""A worker started with a variable renamed in 0.2 does not start: it exits with an error naming the
variable to set instead, by name, never with the value (a silently ignored setting would run the
pool on a default the operator did not choose). A real control worker, started as ``ragline up``
starts it."""

from __future__ import annotations

import pytest

from tests.pools import start_pool

pytestmark = pytest.mark.slow


def test_a_worker_with_a_renamed_variable_exits_naming_its_replacement(stack):
    env = {
        "RAGLINE_WORKER_WARMUP": "false",  # renamed: workers.warmup
        "RAGLINE_METRICS_PASSWORD": "old-name-metrics-pw-7f3a",  # renamed, and a secret
    }
    worker = start_pool(stack, "control", env=env)
    try:
        code = worker.proc.wait(60)
    finally:
        worker.stop()
    text = worker.log_text()
    assert code != 0
    assert "RAGLINE_METRICS_PASSWORD is no longer read: set RAGLINE_OPS_METRICS_PASSWORD" in text
    assert "RAGLINE_WORKER_WARMUP is no longer read: set RAGLINE_WORKERS_WARMUP" in text
    assert "old-name-metrics-pw-7f3a" not in text
