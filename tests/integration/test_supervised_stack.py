"""A real ``ragline up`` stack under its supervisor: a pool process killed with SIGKILL comes back,
serves a question, and ``ragline status`` and the metrics say it restarted; a stack that runs in part
exits 1 naming what is stopped, and ``ragline up`` starts the rest."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from ragline.ingest.enqueue import default_source_name
from ragline.shared.stack.services import free_port
from tests.integration.test_cli_stack import _ours
from tests.pools import free_port_run

RAGLINE = [sys.executable, "-m", "ragline.cli"]


def stack_env(home: Path) -> dict[str, str]:
    """The environment of a ``ragline up`` in ``home`` with ports of its own and one process per pool."""
    return {
        **os.environ,
        "RAGLINE_SERVICES_HOME": str(home),
        "RAGLINE_FLOWER_PORT": str(free_port()),
        "RAGLINE_OPS_METRICS_PORT": str(free_port_run(3)),
        "RAGLINE_WORKERS_INGEST_CONCURRENCY": "1",
        "RAGLINE_WORKERS_QUERY_CONCURRENCY": "1",
    }


@contextmanager
def cli_stack() -> Iterator[tuple[Path, Callable[..., subprocess.CompletedProcess]]]:
    """``ragline up`` in a fresh home (ports of its own); ``ragline down`` and nothing left after."""
    # not under tmp_path: the embedded Postgres runs as another user that must traverse the home's parents
    home = Path(tempfile.mkdtemp(prefix="rl-sup-")) / "home"
    env = stack_env(home)

    def run(*a: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([*RAGLINE, *a], env=env, capture_output=True, text=True, timeout=timeout)

    try:
        up = run("up")
        assert up.returncode == 0, up.stderr + _log_tails(home)
        yield home, run
    finally:
        down = run("down")
        psutil.wait_procs(_ours(home), timeout=10)
        left = _ours(home)
        shutil.rmtree(home.parent, ignore_errors=True)
    assert down.returncode == 0, down.stderr
    assert left == []


def _log_tails(home: Path, lines: int = 12) -> str:
    return "".join(
        f"\n--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        for log in sorted((home / "logs").glob("*.log"))
    )


def status(run) -> tuple[int, dict]:
    st = run("status", "--json")
    return st.returncode, json.loads(st.stdout)


def kill_and_wait_restart(home: Path, run, name: str, timeout: float = 90) -> dict:
    """SIGKILL process ``name`` (the pool's main process, not its group); its restart entry once
    the supervisor started it again with another pid."""
    pid = int((home / "run" / f"{name}.pid").read_text())
    before = status(run)[1]["restarts"].get(name, {}).get("restarts", 0)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while True:
        code, st = status(run)
        entry = st["restarts"].get(name, {})
        if st["processes"][name] not in (None, pid) and entry.get("restarts") == before + 1:
            assert code == 0, st
            return entry
        assert time.monotonic() < deadline, f"{name} not restarted: {st['processes']}, {st['restarts']}"
        time.sleep(0.5)


def ask(run, tenant: str, doc_id: str) -> None:
    out = run("ask", "Что делает ragline?", "--tenant", tenant, "--groups", "public", "--json", timeout=180)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["citations"] and answer["citations"][0]["doc_id"] == doc_id, answer


@pytest.mark.slow
def test_a_killed_pool_comes_back_serves_and_status_says_it_restarted(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "about.md").write_text("# О системе\n\nragline отвечает на вопросы со ссылками на документы.\n")
    doc_id = f"{default_source_name(docs)}/about.md"
    with cli_stack() as (home, run):
        ing = run("ingest", str(docs), "--tenant", "sup", "--acl", "public", "--wait", "--json")
        assert ing.returncode == 0, ing.stderr

        entry = kill_and_wait_restart(home, run, "worker-query")
        assert entry["last_exit"] == "killed by SIGKILL" and entry["last_restart"].endswith("Z")
        ask(run, "sup", doc_id)  # the restarted pool serves
        readable = run("status")
        assert "worker-query restarts" in readable.stdout and "killed by SIGKILL" in readable.stdout
        log = (home / "logs" / "supervisor.log").read_text()
        assert "worker-query (pid" in log and "killed by SIGKILL" in log and "restarted worker-query" in log
        rows = json.loads(run("metrics", "--json").stdout)
        assert {
            "pool": "query",
            "metric": "rag_process_restarts_total",
            "labels": {"process": "worker-query"},
            "type": "counter",
            "value": 1.0,
        } in rows

        # no supervisor, Flower dead: partly running, exit 1 naming both; `ragline up` starts the rest
        for name in ("supervisor", "flower"):
            os.killpg(int((home / "run" / f"{name}.pid").read_text()), signal.SIGKILL)
        time.sleep(1)
        code, st = status(run)
        said = " ".join(run("status").stderr.split())
        assert code == 1 and st["stack"] == "partial"
        assert "the stack runs in part: supervisor, flower stopped" in said
        up = run("up")
        assert up.returncode == 0, up.stderr
        code, st = status(run)
        assert code == 0 and all(st["processes"].values()), st
