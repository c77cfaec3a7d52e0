"""Dead processes on a real ``ragline up`` stack: every process the supervisor runs (each pool's
worker, each metrics server, beat, Flower) killed with SIGKILL comes back with another pid and its
restart recorded; a pool killed again and again comes back after a doubling delay, then ingests."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.integration.test_supervised_stack import cli_stack, kill_and_wait_restart, status

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
