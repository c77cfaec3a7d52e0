"""Dead processes on a real ``ragline up`` stack: every process the supervisor runs (each pool's
worker, each metrics server, beat, Flower) killed with SIGKILL comes back with another pid and its
restart recorded; a pool killed again and again comes back after a doubling delay, then ingests."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.test_cli_stack import _ours
from tests.integration.test_supervised_stack import (
    RAGLINE,
    cli_stack,
    kill_and_wait_restart,
    stack_env,
    status,
)

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def test_every_supervised_process_comes_back_and_a_crash_loop_backs_off(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Раздел\n\nтекст после перезапуска пула.\n")
    with cli_stack() as (home, run):
        names = [n for n in status(run)[1]["processes"] if n != "supervisor"]
        assert len(names) == 8, names
        for name in names:
            entry = kill_and_wait_restart(home, run, name)
            assert entry["restarts"] == 1 and entry["last_exit"] == "killed by SIGKILL", (name, entry)

        # the whole group of the ingest pool (parent and prefork children), three times in a row
        for _ in range(3):
            pid = int((home / "run" / "worker-ingest.pid").read_text())
            os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + 90
            while (home / "run" / "worker-ingest.pid").read_text() == str(pid):
                assert time.monotonic() < deadline, "worker-ingest not restarted"
                time.sleep(0.2)
        log = (home / "logs" / "supervisor.log").read_text()
        delays = [
            int(d)
            for d in re.findall(r"worker-ingest \(pid \d+\) killed by SIGKILL .*restarting in (\d+) s", log)
        ]
        # each death within a minute of its start doubles the delay (the first kill above may be
        # more than a minute before these, which starts the count again)
        assert delays[-3:] in ([1, 2, 4], [2, 4, 8]), log
        assert status(run)[1]["restarts"]["worker-ingest"]["restarts"] == 4

        ing = run("ingest", str(docs), "--tenant", "chaos", "--acl", "g", "--wait", "--json", timeout=300)
        assert ing.returncode == 0, ing.stderr


def test_flower_losing_its_port_after_the_check_is_a_failed_start_not_a_success():
    """Issue 52's case past the port check: another program takes Flower's port after ``ragline up``
    checked it (here: once the migrations ran). Flower dies with EADDRINUSE; up exits 1 naming it and
    the error instead of printing Flower's address; status records its exits (the supervisor goes on
    retrying it with backoff while the port stays taken)."""
    home = Path(tempfile.mkdtemp(prefix="rl-port-")) / "home"
    env = stack_env(home)
    held = socket.socket()
    try:
        up = subprocess.Popen(
            [*RAGLINE, "up"], env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        err = []
        for line in up.stderr:
            err.append(line)
            if line.startswith("migrations"):
                held.bind(("127.0.0.1", int(env["RAGLINE_FLOWER_PORT"])))
                held.listen()
        assert up.wait(timeout=300) == 1, "".join(err)
        said = " ".join("".join(err).split())
        assert "error: ragline up: flower exited with status 1 right after its start" in said, said
        assert "Address already in use" in said and "flower http://" not in said
        st = subprocess.run(
            [*RAGLINE, "status", "--json"], env=env, capture_output=True, text=True, timeout=120
        )
        assert (
            st.returncode in (0, 1)  # 1 in a backoff, 0 while a retry is starting
            and json.loads(st.stdout)["restarts"]["flower"]["last_exit"] == "exited with status 1"
        )
    finally:
        held.close()
        subprocess.run([*RAGLINE, "down"], env=env, capture_output=True, timeout=300)
        psutil.wait_procs(_ours(home), timeout=10)
        left = _ours(home)
        shutil.rmtree(home.parent, ignore_errors=True)
    assert left == []
