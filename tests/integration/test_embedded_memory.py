"""`RAGLINE_SERVICES_PG_SHARED_BUFFERS`: the embedded PostgreSQL runs with it (by default a quarter of the
machine's memory, at most 4GB): a server `start_postgres` starts is restarted once when it lacks it
(shared memory is sized at start); a running server it adopts is never restarted under its workers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO

SCRIPT = """
import json, os
import psycopg
from ragline.shared.stack import services
from ragline.shared.config.settings import get_settings
s = get_settings()
url = services.start_postgres(s)
with psycopg.connect(url) as c:
    buffers = c.execute(
        "SELECT setting::bigint * pg_size_bytes(unit) FROM pg_settings WHERE name = 'shared_buffers'"
    ).fetchone()[0]
print(json.dumps({"pid": services.postgres_pid(s), "shared_buffers": buffers}))
if os.environ.get("STOP"):
    services.stop_postgres(s)
"""


def _start(home: Path, buffers: str | None, stop: bool = False) -> dict:
    env = {**os.environ, "RAGLINE_SERVICES_HOME": str(home), "STOP": "1" if stop else ""}
    env.pop("RAGLINE_SERVICES_PG_SHARED_BUFFERS", None)
    if buffers:
        env["RAGLINE_SERVICES_PG_SHARED_BUFFERS"] = buffers
    for var in ("DATABASE_URL", "RAGLINE_SERVICES_DATABASE_URL"):
        env.pop(var, None)
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=180
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_embedded_server_runs_with_the_configured_shared_buffers():
    # not under pytest's tmp_path: run as root, the embedded Postgres runs as another user (see test_cli_stack)
    home = Path(tempfile.mkdtemp(prefix="rl-mem-")) / "home"
    try:
        default = _start(home, None, stop=True)  # a fresh home: initdb, start, then one restart for it
        quarter = psutil.virtual_memory().total // 4
        assert default["shared_buffers"] == max(128 * 2**20, min(4 * 2**30, quarter // 2**20 * 2**20))
        assert (
            default["shared_buffers"] > 128 * 2**20
        )  # not PostgreSQL's own default (any machine with > 512MB)
        set_ = _start(home, "160MB")
        assert set_["shared_buffers"] == 160 * 2**20
        again = _start(home, "160MB")
        assert again == set_  # already in place: adopted, not restarted
        # a running server (its workers connected) is not restarted: the change waits for its next start
        running = _start(home, "auto", stop=True)
        assert running == set_
        back = _start(home, "auto", stop=True)
        assert back["shared_buffers"] == default["shared_buffers"] and back["pid"] != set_["pid"]
    finally:
        shutil.rmtree(home.parent, ignore_errors=True)
