"""Another local user against a running ``ragline up``: the stack's files under the home (the Redis
append-only file with every task message and result, logs, pid files, metrics, secrets, the
runtime file, Postgres's data) read by an unprivileged user (``nobody``) after an ACL-restricted
document was ingested and asked about, so its text is in the append-only file and the answer.
Every file must be unreadable and every folder unlistable to that user; the home itself may only
be passed through (0711 as root). Results: the ``attacks_local_files`` section of
``bench/results/chaos.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest

from ragline.shared.stack.services import free_port
from tests.chaos import harness
from tests.integration.test_cli_stack import RAGLINE, _ours
from tests.pools import free_port_run

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

MARKER = "BOARD-ONLY-7c1e"
NOBODY = 65534
#: what the other user runs: the standard library only, on the system interpreter
PROBE = """
import json, os, sys
paths = json.load(sys.stdin)
read, listed = [], []
for p in paths:
    try:
        if os.path.isdir(p) and not os.path.islink(p):
            os.listdir(p)
            listed.append(p)
        else:
            with open(p, "rb") as fh:
                fh.read(1)
            read.append(p)
    except OSError:
        pass
print(json.dumps({"read": read, "listed": listed}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the probe as another user")
def test_another_local_user_reads_nothing_of_a_running_stack(tmp_path):
    home = Path(tempfile.mkdtemp(prefix="rl-local-")) / "home"
    os.chmod(home.parent, 0o755)  # what a home's parent usually is: the home's own mode must hold
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "board.md").write_text(f"# Совет\n\nРешение совета: {MARKER}, только для совета.\n")
    env = {
        **os.environ,
        "RAGLINE_SERVICES_HOME": str(home),
        "RAGLINE_FLOWER_PORT": str(free_port()),
        "RAGLINE_OPS_METRICS_PORT": str(free_port_run(3)),
        "RAGLINE_WORKERS_INGEST_CONCURRENCY": "1",
        "RAGLINE_WORKERS_QUERY_CONCURRENCY": "1",
    }

    def run(*a):
        return subprocess.run([*RAGLINE, *a], env=env, capture_output=True, text=True, timeout=300)

    try:
        up = run("up")
        assert up.returncode == 0, up.stderr
        ing = run("ingest", str(docs), "--tenant", "local", "--acl", "board", "--wait", "--json")
        assert ing.returncode == 0, ing.stderr
        ask = run("ask", "Какое решение совета?", "--tenant", "local", "--groups", "board", "--json")
        assert MARKER in ask.stdout
        paths = [str(p) for p in home.rglob("*") if not p.is_socket()]
        holding = [p for p in paths if Path(p).is_file() and MARKER.encode() in Path(p).read_bytes()]
        probe = subprocess.run(
            ["/usr/bin/python3", "-c", PROBE],
            input=json.dumps([str(home), *paths]),
            capture_output=True,
            text=True,
            timeout=60,
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            cwd="/",
        )
        assert probe.returncode == 0, probe.stderr
        got = json.loads(probe.stdout)
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    psutil.wait_procs(_ours(home), timeout=10)
    shutil.rmtree(home.parent, ignore_errors=True)

    assert any(p.endswith("appendonly.aof") for p in holding), holding  # the file that matters
    rel = lambda ps: sorted(str(Path(p).relative_to(home)) if p != str(home) else "." for p in ps)  # noqa: E731
    assert rel(got["read"]) == [] and rel(got["listed"]) == [], got
    harness.record(
        "attacks_local_files",
        [
            {
                "attack": f"another local user reads a running stack's home ({len(paths)} files and folders)",
                "status": f"{len(got['read'])} read, {len(got['listed'])} listed",
                "error": f"the restricted text was in {len(holding)} of them: " + ", ".join(rel(holding)[:5]),
            }
        ],
    )
