"""``ragline up``'s supervisor on real processes (sleepers in a temp home): a process that dies is
restarted with backoff, the restart recorded (count, time, how it ended) and exported as
``rag_process_restarts_total``; and the pure rules of ``ragline status`` and ``ragline metrics``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragline.shared.config.settings import Settings
from ragline.shared.stack import processes, supervisor

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture()
def sleepers(tmp_path, monkeypatch):
    settings = Settings(services={"home": tmp_path / "home"})
    specs = [processes.ProcSpec("worker-query", SLEEP), processes.ProcSpec("flower", SLEEP)]
    monkeypatch.setattr(processes, "specs", lambda s: specs)
    processes.prepare_home(settings)
    sup = supervisor.Supervisor(settings)
    yield settings, sup
    for child in sup.children.values():
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _until(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_killed_process_is_restarted_with_backoff_and_the_restart_recorded(sleepers):
    settings, sup = sleepers
    sup.tick()
    first = processes.pid_of(settings, "worker-query")
    assert first and processes.pid_of(settings, "flower")
    assert supervisor.read_restarts(settings) == {}

    os.kill(first, signal.SIGKILL)
    _until(lambda: not sup.children["worker-query"].alive())
    sup.tick()  # noted dead: recorded at once, restarted after the first delay
    entry = supervisor.read_restarts(settings)["worker-query"]
    assert entry["down"] is True and entry["last_exit"] == "killed by SIGKILL" and entry["restarts"] == 0
    due = sup.children["worker-query"].due
    assert due is not None and due - time.monotonic() == pytest.approx(supervisor.BACKOFF_FIRST_S, abs=0.3)
    _until(lambda: (sup.tick(), processes.pid_of(settings, "worker-query"))[1] not in (None, first))
    entry = supervisor.read_restarts(settings)["worker-query"]
    assert entry["restarts"] == 1 and entry["down"] is False and entry["last_restart"].endswith("Z")
    assert "flower" not in supervisor.read_restarts(settings)  # the other one was left alone

    # a second quick death doubles the delay
    second = processes.pid_of(settings, "worker-query")
    os.kill(second, signal.SIGTERM)
    _until(lambda: not sup.children["worker-query"].alive())
    sup.tick()
    assert supervisor.read_restarts(settings)["worker-query"]["last_exit"] == "killed by SIGTERM"
    due = sup.children["worker-query"].due
    assert due - time.monotonic() == pytest.approx(2 * supervisor.BACKOFF_FIRST_S, abs=0.3)

    # exported per pool: the query endpoint reports its worker, the control endpoint Flower
    query = {s.labels["process"]: s.value for m in supervisor.restarts_collector(settings, "query").collect()
             for s in m.samples if s.name == "rag_process_restarts_total"}  # fmt: skip
    control = {s.labels["process"]: s.value for m in supervisor.restarts_collector(settings, "control").collect()
               for s in m.samples if s.name == "rag_process_restarts_total"}  # fmt: skip
    assert query == {"worker-query": 1.0}
    assert control == {"supervisor": 0.0, "flower": 0.0}


def test_a_new_supervisor_adopts_running_processes_and_reports_an_unknown_exit(sleepers):
    settings, sup = sleepers
    sup.tick()
    pid = processes.pid_of(settings, "flower")
    again = supervisor.Supervisor(settings)  # the first one was killed; `ragline up` started another
    again.tick()
    assert again.children["flower"].pid == pid and again.children["flower"].proc is None  # not restarted
    os.kill(pid, signal.SIGKILL)
    sup.children["flower"].proc.wait()  # reaped by its parent (the old supervisor, here this test)
    again.tick()
    assert "exit status unknown" in supervisor.read_restarts(settings)["flower"]["last_exit"]
    sup.children.clear()
    sup.children.update(again.children)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (-9, "killed by SIGKILL"),
        (-15, "killed by SIGTERM"),
        (1, "exited with status 1"),
        (0, "exited with status 0"),
    ],
)
def test_exit_reasons(code, reason):
    assert supervisor.exit_reason(code) == reason


def test_backoff_doubles_to_a_cap():
    delays = [supervisor.backoff_s(n) for n in range(1, 10)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0] and delays[-1] == supervisor.BACKOFF_MAX_S


def test_every_port_of_the_stack_is_checked_and_named_with_its_variable(tmp_path):
    """Each TCP port ``ragline up`` binds, one at a time held by another program: reported with the
    variable that moves it; a component that runs holds its own port and is not reported."""
    import socket

    from tests.pools import free_port_run

    base = free_port_run(5)  # metrics: base .. base + 2
    s = Settings(ops={"metrics_port": base}, flower={"port": base + 3},
                 services={"home": tmp_path, "redis_port": base + 4})  # fmt: skip
    ports = processes.stack_ports(s)
    assert {p.owner for p in ports} == {
        "redis",
        "metrics-ingest",
        "metrics-query",
        "metrics-control",
        "flower",
    }
    variables = {p.owner: p.variable for p in ports}
    assert (
        variables["flower"] == "RAGLINE_FLOWER_PORT" and variables["redis"] == "RAGLINE_SERVICES_REDIS_PORT"
    )
    assert variables["metrics-query"] == "RAGLINE_OPS_METRICS_PORT"
    assert processes.port_problems(s, set()) == []
    for port in ports:
        with socket.socket() as held:
            held.bind((port.host, port.port))
            held.listen()
            problems = processes.port_problems(s, set())
            assert [(p.owner, why) for p, why in problems] == [(port.owner, "is in use by another program")]
            assert processes.port_problems(s, {port.owner}) == []  # its own, running


def test_status_exit_codes_follow_the_documented_table():
    from ragline.cli.stack import stack_state, status_exit_code, stopped_parts

    def info(pg: bool, redis: bool, procs: dict[str, int | None], embedded: bool = True) -> dict:
        out = {
            "postgres": {"embedded": embedded, "pid": 1 if pg else None},
            "redis": {"embedded": embedded, "pid": 2 if redis else None},
            "processes": procs,
        }
        out["stack"] = stack_state(out)
        return out

    up, down = {"supervisor": 3, "flower": 4}, {"supervisor": None, "flower": None}
    assert status_exit_code(info(True, True, up)) == 0
    assert status_exit_code(info(False, False, down)) == 4  # stopped
    assert status_exit_code(info(True, False, up)) == 4  # Redis down: not reachable
    partial = info(True, True, {"supervisor": 3, "flower": None})
    assert status_exit_code(partial) == 1 and stopped_parts(partial) == ["flower"]
    assert status_exit_code(info(False, False, {"supervisor": 3, "flower": None}, embedded=False)) == 1
    assert status_exit_code(info(False, False, down, embedded=False)) == 4


def test_status_of_a_stopped_stack_exits_4_and_cuts_no_word(tmp_path):
    """Issue 52: it exited 0, and its error text ended "...or RAGLINE_SERVICES_HOME t"."""
    import json

    home = tmp_path / "a-rather-long-folder-name-for-the-home" / "nothing-here"
    env = {**os.environ, "RAGLINE_SERVICES_HOME": str(home), "COLUMNS": "80"}
    for args in (["status"], ["status", "--json"]):
        run = subprocess.run([sys.executable, "-m", "ragline.cli", *args], env=env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert run.returncode == 4, run.stderr
        assert "error: the stack is not running (ragline up starts it)" in run.stderr
        assert "Traceback" not in run.stderr
    info = json.loads(run.stdout)
    assert info["jobs_error"].endswith("RAGLINE_SERVICES_HOME to the home of the running stack")


def test_up_reports_a_process_that_died_right_after_its_start(tmp_path, monkeypatch, capsys):
    """Flower dying with EADDRINUSE a moment after ``ragline up`` started it is a failure (exit 1)
    that names it, how it ended and its log's last line, not a success."""
    import typer

    from ragline.cli import stack

    settings = Settings(services={"home": tmp_path / "home"})
    monkeypatch.setattr(processes, "specs", lambda s: [processes.ProcSpec("flower", SLEEP)])
    processes.prepare_home(settings)
    sup = supervisor.Supervisor(settings)
    since = time.time()
    (settings.home_dir / "logs" / "flower.log").write_text("OSError: [Errno 98] Address already in use\n")
    sup.children["flower"] = supervisor.Child(os.getpid(), time.monotonic())  # "ran" a moment
    sup._died("flower", sup.children["flower"], 1, time.monotonic())
    monkeypatch.setattr(stack, "STARTUP_CHECK_S", 0.0)
    with pytest.raises(typer.Exit) as exc:
        stack._check_alive(settings, since)
    assert exc.value.exit_code == 1
    said = " ".join(capsys.readouterr().err.split())
    assert (
        "flower exited with status 1 right after its start: OSError: [Errno 98] Address already in use"
        in said
    )


def test_metrics_lists_per_pool_only_what_its_processes_recorded(tmp_path):
    """Every process declares every metric; the query path's unlabelled counters at zero are not the
    ingest pool's (issue 52: "lists every metric of every pool"). Real multiprocess files per pool."""
    from ragline.cli.ops import pool_rows
    from ragline.shared.worker.metrics_server import registry_for

    records = {
        "ingest": "m.EMBED_TEXTS.labels('local-e5').inc(5); m.DOCUMENTS_PROCESSED.labels('stored').inc()",
        "query": "m.RETRIEVED_CHUNKS.observe(3); m.EMPTY_CONTEXT.inc()",
        "control": "m.JOBS_STUCK.inc()",
    }
    expected = {
        "ingest": {"rag_embed_texts_total", "rag_documents_processed_total"},
        "query": {"rag_retrieved_chunks", "rag_empty_context_total"},
        "control": {"rag_jobs_stuck_total"},
    }
    from prometheus_client import generate_latest

    for pool, code in records.items():
        d = tmp_path / pool
        d.mkdir()
        subprocess.run(
            [sys.executable, "-c", f"import ragline.shared.worker.metrics as m; {code}"],
            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(d)}, check=True, timeout=60,
        )  # fmt: skip
        rows = pool_rows(pool, generate_latest(registry_for(Path(d))).decode())
        assert {r["metric"] for r in rows} == expected[pool], pool
