"""`make run` as a user runs it: it stops only a stack it started itself. A stack the user had started
(`ragline up`, `make up`) is used and left running, with the same processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import psutil
import pytest

from ragline.shared.stack.services import free_port
from tests.conftest import REPO
from tests.integration.test_cli_stack import _ours
from tests.pools import free_port_run

RAGLINE = [sys.executable, "-m", "ragline.cli"]


@pytest.mark.slow
def test_make_run_stops_only_the_stack_it_started(tmp_path):
    home, docs = tmp_path / "home", tmp_path / "docs"
    docs.mkdir()
    # the documents the demo's questions are about, as in make run's own corpus: the Russian
    # overview (the queues question), the architecture (isolation) and the ACL sync's code
    shutil.copy(REPO / "docs" / "overview.ru.md", docs)
    shutil.copy(REPO / "docs" / "architecture.md", docs)
    shutil.copy(REPO / "ingest" / "acl_sync.py", docs)  # and its code question: where permissions sync
    env = {
        **os.environ,
        "RAGLINE_SERVICES_HOME": str(home),
        "RAGLINE_FLOWER_PORT": str(free_port()),
        "RAGLINE_OPS_METRICS_PORT": str(free_port_run(3)),
        "RAGLINE_WORKERS_INGEST_CONCURRENCY": "1",
        "RAGLINE_WORKERS_QUERY_CONCURRENCY": "1",
    }
    env.pop("XDG_RUNTIME_DIR", None)  # as in containers and ssh sessions: no warning about it
    env.pop("MAKEFLAGS", None)
    # -o: the install stamp counts as up to date, so this runs the target's recipe, not an install
    make = ["make", "--no-print-directory", "-C", str(REPO), "-o", ".venv/.installed", "run", f"DOCS={docs}"]

    def run(*a):
        return subprocess.run([*RAGLINE, *a], env=env, capture_output=True, text=True, timeout=300)

    def status() -> dict:
        return json.loads(run("status", "--json").stdout)

    # nothing runs: make run starts the stack and stops all of it at the end
    assert status()["stack"] == "stopped"
    own = subprocess.run(make, env=env, capture_output=True, text=True, timeout=900)
    assert own.returncode == 0, own.stdout[-3000:] + own.stderr[-3000:]
    assert "[1]" in own.stdout and "ingested 3 documents" in own.stdout
    assert "RuntimeDirWarning" not in own.stderr and "XDG_RUNTIME_DIR" not in own.stderr
    psutil.wait_procs(_ours(home), timeout=10)
    assert _ours(home) == [] and status()["stack"] == "stopped"

    # the user's stack: used, and left running with the same processes
    try:
        up = run("up")
        assert up.returncode == 0, up.stderr
        before = status()
        assert before["stack"] == "running"
        used = subprocess.run(make, env=env, capture_output=True, text=True, timeout=900)
        assert used.returncode == 0, used.stdout[-3000:] + used.stderr[-3000:]
        assert "using the running stack; it stays up" in used.stderr
        assert "3 unchanged" in used.stdout  # the same stack's database: nothing to embed again
        after = status()
        assert after["stack"] == "running"
        assert (after["processes"], after["postgres"]["pid"], after["redis"]["pid"]) == (
            before["processes"],
            before["postgres"]["pid"],
            before["redis"]["pid"],
        )
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    psutil.wait_procs(_ours(home), timeout=10)
    assert _ours(home) == []
