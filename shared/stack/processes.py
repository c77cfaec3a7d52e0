"""Background processes of ``ragline up``: worker pools, their metrics servers, beat and Flower,
started and restarted by the supervisor (``shared/stack/supervisor.py``), and the ports they bind.

Each runs in its own session (process group) with a pid file and a log under the ragline
home; ``ragline down`` stops the supervisor, then signals exactly those groups and waits until they
are gone.
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

from ragline.shared.config.settings import Settings, env_name
from ragline.shared.sdk.names import CELERY_APP, POOLS
from ragline.shared.stack.services import port_problem, read_pid
from ragline.shared.worker import credentials
from ragline.shared.worker.metrics_server import metrics_dir, metrics_port, reset_dir

#: the process ``ragline up`` leaves running to start and restart the others
#: (``shared/stack/supervisor.py``); ``ragline down`` stops it first
SUPERVISOR = "supervisor"


@dataclass(frozen=True)
class ProcSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # extra environment for this process only


def pool_kind(settings: Settings, pool: str) -> str:
    """Celery's execution pool for a ragline pool."""
    return settings.effective_query_pool if pool == "query" else "prefork"


def pool_concurrency(settings: Settings, pool: str) -> int:
    return {
        "ingest": settings.workers.ingest_concurrency,
        "query": settings.workers.query_concurrency,
        "control": settings.workers.acl_concurrency,
    }[pool]


def local_processes(settings: Settings, pool: str) -> int:
    """How many worker processes ``ragline up`` runs for ``pool`` on this host: a solo pool runs one
    process per concurrent task (each consumes on its own), every other kind one process."""
    return pool_concurrency(settings, pool) if pool_kind(settings, pool) == "solo" else 1


def worker_command(settings: Settings, pool: str, index: int = 1, siblings: int = 1) -> ProcSpec:
    """The one definition of a worker process: its ``celery worker`` command line and environment.

    ``ragline worker POOL`` executes it; ``ragline up``, the container entrypoint and the Kubernetes
    manifests all start workers through ``ragline worker``. ``siblings`` is how many processes of
    this pool share the host's cores (several solo processes under ``ragline up``; one per pod).
    """
    if pool not in POOLS:
        raise ValueError(f"unknown pool {pool!r}: one of {', '.join(POOLS)}")
    kind, n = pool_kind(settings, pool), pool_concurrency(settings, pool)
    suffix = "" if index == 1 else f"-{index}"
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir(settings, pool))}
    if "OMP_NUM_THREADS" not in os.environ:  # an operator's explicit choice wins
        # prefork: one thread per child, the pool is the parallelism; threads and solo: one process
        # runs the model for every task it takes, so it may use the cores it shares with its
        # siblings (two OpenMP teams of all cores each spin against each other)
        threads = 1 if kind == "prefork" else max(1, (os.cpu_count() or 1) // max(1, siblings))
        env["OMP_NUM_THREADS"] = str(threads)
    argv = [sys.executable, "-m", "celery", "-A", CELERY_APP, "worker", "-n", f"{pool}{suffix}@%h"]
    argv += ["--pool", kind] if kind == "solo" else ["-c", str(n), "--pool", kind]
    argv += ["-Q", ",".join(POOLS[pool]), "-E", "--without-gossip", "--without-mingle"]
    argv += ["--loglevel", settings.ops.log_level]
    return ProcSpec(f"worker-{pool}{suffix}", argv, env)


def specs(settings: Settings) -> list[ProcSpec]:
    """Every process ``ragline up`` runs: each worker through ``ragline worker``, one metrics server
    per pool, beat and Flower."""
    run = settings.home_dir / "run"
    celery = [sys.executable, "-m", "celery", "-A", CELERY_APP]
    ragline = [sys.executable, "-m", "ragline.cli"]
    out = []
    for pool in POOLS:
        siblings = local_processes(settings, pool)
        for i in range(1, siblings + 1):
            name = worker_command(settings, pool, i, siblings).name
            out.append(
                ProcSpec(
                    name,
                    [*ragline, "worker", pool, "--index", str(i), "--siblings", str(siblings)],
                    redis_role("worker"),
                )
            )
        penv = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir(settings, pool)), **redis_role("metrics")}
        out.append(
            ProcSpec(
                f"metrics-{pool}", [sys.executable, "-m", "ragline.shared.stack.metrics_endpoint", pool], penv
            )
        )
    out.append(
        ProcSpec(
            "beat",
            [*celery, "beat", "--loglevel", "INFO", "-s", str(run / "celerybeat-schedule")],
            redis_role("worker"),
        )
    )
    out.append(
        ProcSpec(
            "flower",
            [
                *celery,
                "flower",
                f"--address={settings.flower.host}",
                f"--port={settings.flower.port}",
                "--persistent=False",
            ],
            {**flower_env(settings), **redis_role("flower")},
        )
    )
    return out


def supervisor_spec(settings: Settings) -> ProcSpec:
    """The supervisor's own command line (``ragline up`` starts it; it starts :func:`specs`)."""
    return ProcSpec(SUPERVISOR, [sys.executable, "-m", "ragline.shared.stack.supervisor"])


def pool_of(name: str) -> str:
    """The pool whose metrics endpoint reports process ``name``'s restarts: a worker's or metrics
    server's own pool; beat, Flower and the supervisor belong to the control pool (maintenance)."""
    for pool in POOLS:
        if name in (f"worker-{pool}", f"metrics-{pool}") or name.startswith(f"worker-{pool}-"):
            return pool
    return "control"


@dataclass(frozen=True)
class Port:
    """A TCP port the stack listens on, who listens and the variable that moves it."""

    owner: str  # a process name of :func:`specs`, or "redis"
    host: str
    port: int
    variable: str


def stack_ports(settings: Settings) -> list[Port]:
    """Every TCP port ``ragline up`` binds. The embedded Postgres listens on a unix socket only; the
    embedded Redis on a port only when one is set (otherwise a free one is picked at its start)."""
    out = []
    if settings.embedded_redis and settings.services.redis_port:
        out.append(
            Port("redis", "127.0.0.1", settings.services.redis_port, env_name("services", "redis_port"))
        )
    for pool in POOLS:
        out.append(
            Port(
                f"metrics-{pool}",
                settings.ops.metrics_host,
                metrics_port(settings, pool),
                env_name("ops", "metrics_port"),
            )
        )
    out.append(Port("flower", settings.flower.host, settings.flower.port, env_name("flower", "port")))
    return out


def port_problems(settings: Settings, owners_running: set[str]) -> list[tuple[Port, str]]:
    """The stack's ports that cannot be bound, with why: those of components not running (a
    running one holds its own port)."""
    out = []
    for p in stack_ports(settings):
        if p.owner not in owners_running and (why := port_problem(p.host, p.port)):
            out.append((p, why))
    return out


def redis_role(role: str) -> dict[str, str]:
    """The environment that makes a process log in to the embedded Redis as ``role``
    (``shared/sdk/redis_acl.py``); a ``REDIS_URL`` of the operator's wins (its user decides)."""
    return {"RAGLINE_SERVICES_REDIS_ROLE": role}


def flower_env(settings: Settings) -> dict[str, str]:
    """Flower's basic auth, in Flower's environment only (never on a command line, which every local
    user can read, nor in the workers' environment): the set or the generated password."""
    password = credentials.password(settings, "flower") or ""
    return {"FLOWER_BASIC_AUTH": f"{settings.flower.user}:{password}"}


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
    # the derived name wins over an inherited old one; process listings (and the stack's tests)
    # find the stack's processes by it
    env["RAGLINE_SERVICES_HOME"] = str(settings.home_dir)
    return env


def start_all(settings: Settings, only: set[str] | None = None) -> dict[str, int]:
    """Start every process (or those named in ``only``) that is not already running (unsupervised:
    ``ragline up`` starts them under :mod:`ragline.shared.stack.supervisor` instead)."""
    prepare_home(settings)
    todo = [s for s in specs(settings) if only is None or s.name in only]
    if any(s.name == "flower" for s in todo):  # Flower cannot check its own password
        credentials.check_exposure(
            "Flower", settings.flower.host, settings.flower.user, credentials.password(settings, "flower")
        )
    reset_idle_metrics(settings, {s.name for s in todo})
    started = {}
    for spec in todo:
        pid = read_pid(_pidfile(settings, spec.name))
        started[spec.name] = pid if pid is not None else spawn(settings, spec).pid
    return started


def prepare_home(settings: Settings) -> None:
    credentials.secure_home(settings)
    credentials.private_dir(settings.home_dir / "run")
    credentials.private_dir(settings.home_dir / "logs")


def reset_idle_metrics(settings: Settings, names: set[str]) -> None:
    """Fresh metrics files for each pool among ``names`` none of whose worker processes runs yet (a
    worker the supervisor restarts keeps its pool's files: its counters go on)."""
    running_now = {name for name, pid in running(settings).items() if pid is not None}
    for pool in POOLS:
        pool_names = set(pool_process_names(settings, pool))
        if pool_names & names and not pool_names & running_now:
            reset_dir(metrics_dir(settings, pool))


def spawn(settings: Settings, spec: ProcSpec) -> subprocess.Popen:
    """Start ``spec`` in its own session, its output appended to its log, its pid in its pid file."""
    with credentials.open_private_log(_logfile(settings, spec.name)) as log:
        proc = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**child_env(settings), **spec.env},
            start_new_session=True,
            umask=credentials.PRIVATE_UMASK,  # beat's schedule, metrics files, what a task writes
        )
    credentials.write_private(_pidfile(settings, spec.name), str(proc.pid))
    return proc


def pid_of(settings: Settings, name: str) -> int | None:
    """The pid of process ``name`` when it runs."""
    return read_pid(_pidfile(settings, name))


def running(settings: Settings) -> dict[str, int | None]:
    """Each process of the stack (the supervisor first) and its pid, None when it does not run."""
    return {name: pid_of(settings, name) for name in [SUPERVISOR, *(s.name for s in specs(settings))]}


def stop_all(settings: Settings, timeout: float = 30.0, only: set[str] | None = None) -> list[str]:
    """SIGTERM each process group (warm shutdown), then SIGKILL what is left after ``timeout``."""
    stopped = []
    if only is None or SUPERVISOR in only:  # first, or it would restart what stops next
        stopped += _stop_groups(settings, [SUPERVISOR], timeout)
    names = [spec.name for spec in specs(settings) if only is None or spec.name in only]
    return stopped + _stop_groups(settings, names, timeout)


def _stop_groups(settings: Settings, names: list[str], timeout: float) -> list[str]:
    stopped = []
    groups: list[tuple[str, int]] = []
    for name in names:
        pid = read_pid(_pidfile(settings, name))
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGTERM)
                groups.append((name, pid))
            except ProcessLookupError:
                pass
        _pidfile(settings, name).unlink(missing_ok=True)
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
