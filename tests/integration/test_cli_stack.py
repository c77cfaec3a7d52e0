"""`ragline up` / `down` as a user runs them: real prefork pools, beat and Flower in the background."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ragline.ingest.enqueue import default_source_name
from ragline.shared.services import free_port

RAGLINE = [sys.executable, "-m", "ragline.cli"]


def _free_port_run(n: int) -> int:
    """A base port with ``n`` consecutive free ports (one metrics endpoint per pool)."""
    import socket

    for _ in range(50):
        base = free_port()
        try:
            socks = []
            for i in range(n):
                s = socket.socket()
                s.bind(("127.0.0.1", base + i))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


def _ours(home: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.info["environ"] or {}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if str(home) in cmd or env.get("RAGLINE_HOME") == str(home):
            out.append(p)
    return out


@pytest.mark.slow
def test_up_ingest_ask_down_leaves_nothing(tmp_path):
    home = tmp_path / "home"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "about.md").write_text("# О системе\n\nragline отвечает на вопросы со ссылками на документы.\n")
    env = {
        **os.environ,
        "RAGLINE_HOME": str(home),
        "RAGLINE_FLOWER_PORT": str(free_port()),
        "RAGLINE_METRICS_PORT": str(_free_port_run(3)),
        "RAGLINE_INGEST_CONCURRENCY": "1",
        "RAGLINE_QUERY_CONCURRENCY": "1",
    }

    def run(*a, **kw):
        return subprocess.run([*RAGLINE, *a], env=env, capture_output=True, text=True, timeout=300, **kw)  # noqa: E731

    try:
        up = run("up")
        assert up.returncode == 0, up.stderr
        st = json.loads(run("status", "--json").stdout)
        assert all(st["processes"].values()), st
        ing = run("ingest", str(docs), "--tenant", "cli", "--acl", "public", "--wait", "--json")
        assert ing.returncode == 0, ing.stderr
        summary = json.loads(ing.stdout)
        assert summary["documents"] == 1 and summary["chunks"] >= 1 and summary["failed"] == 0
        ask = run("ask", "Что делает ragline?", "--tenant", "cli", "--groups", "public", "--json")
        answer = json.loads(ask.stdout)
        assert answer["citations"]
        assert answer["citations"][0]["doc_id"] == f"{default_source_name(docs)}/about.md"
        assert "[1]" in answer["answer"]
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    psutil.wait_procs(_ours(home), timeout=10)
    assert _ours(home) == []
