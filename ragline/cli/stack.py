"""`ragline up`, `down`, `status`, `migrate`, `worker`: the embedded stack and its processes.

Commands import the stack's modules (Celery, psycopg, the embedded servers) inside their function:
each is needed by one command only, and ``ragline --help`` should not pay for all of them."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ragline.cli.common import EXIT_FAILED, EXIT_UNREACHABLE, console, reload_app
from ragline.cli.lifecycle import lifecycle_rows, lifecycle_status
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.names import POOLS

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="ragline: a RAG backend on Celery and pgvector"
)


@app.command()
def up(
    wait: bool = typer.Option(True, "--wait/--no-wait", help="wait until every worker pool answers a ping"),
) -> None:
    """Start the stack: Postgres, Redis, workers, beat, Flower, under a supervisor.

    Every port is checked first (one taken: exit 4, naming the variable that moves it). Migrations
    are applied before the worker pools start; the supervisor restarts a process that dies, with
    backoff. One that dies right after its start is reported (exit 1), not taken for a success.

    Embedded Postgres and Redis start unless DATABASE_URL / REDIS_URL are set. Passwords that are
    not set are generated into the ragline home first (ragline secrets show);
    Flower or metrics bound beyond loopback with an empty or well-known password stop it before
    anything starts."""
    from ragline.shared.stack import services, supervisor  # start-up: psutil and prometheus_client
    from ragline.shared.worker import credentials
    from ragline.shared.worker.metrics_server import metrics_port  # start-up: prometheus_client
    from ragline.shared.worker.migrate import apply_migrations  # start-up: yoyo loads only for up and migrate

    settings = get_settings()
    try:
        credentials.ensure_all(settings)
        credentials.check_stack(settings)
    except credentials.InsecureSecretError as exc:
        console.print(f"error: ragline up: {exc}", markup=False, highlight=False)
        raise typer.Exit(1) from None
    _check_ports(settings)
    for name, url in services.start_embedded(settings).items():
        console.print(f"[green]{name}[/] {credentials.mask_text(url)}")
    applied = apply_migrations()
    console.print(f"[green]migrations[/] applied {len(applied)}")
    reload_app()
    since = time.time()
    supervisor.ensure_running(settings)
    started = _wait_started(settings, timeout=60)
    console.print(f"[green]processes[/] {', '.join(f'{k}={v}' for k, v in started.items())}")
    if wait:
        _wait_workers(timeout=120)
    _check_alive(settings, since)
    flower = f"http://{settings.flower.host}:{settings.flower.port}"
    console.print(_where_secret("flower", flower, settings), soft_wrap=True)
    ports = ", ".join(str(metrics_port(settings, pool)) for pool in POOLS)
    metrics = f"http://{settings.ops.metrics_host}:{{{ports}}}/metrics"
    console.print(_where_secret("metrics", metrics, settings), soft_wrap=True)


#: how long a process must stay up after ``ragline up`` started it before up reports success
STARTUP_CHECK_S = 3.0


def _check_ports(settings) -> None:
    """Every port the stack binds, before anything starts: one another program holds ends ``up``
    with exit 4, naming the port and the variable that moves it."""
    from ragline.shared.stack import processes, services  # start-up: psutil and prometheus_client

    ours = {name for name, pid in processes.running(settings).items() if pid}
    if services.redis_pid(settings):
        ours.add("redis")
    problems = processes.port_problems(settings, ours)
    for port, why in problems:
        fail_line(
            f"ragline up: port {port.port} on {port.host} ({port.owner}) {why}; set {port.variable} to move it"
        )
    if problems:
        raise typer.Exit(EXIT_UNREACHABLE)


def _wait_started(settings, timeout: float) -> dict[str, int]:
    """Until the supervisor started every process; name -> pid."""
    from ragline.shared.stack import processes  # start-up: psutil and prometheus_client

    deadline = time.monotonic() + timeout
    while True:
        pids = processes.running(settings)
        if all(pids.values()) or time.monotonic() > deadline:
            return {k: v for k, v in pids.items() if v}
        time.sleep(0.2)


def _check_alive(settings, since: float) -> None:
    """A moment after the start, every process still runs and none died since ``since``: a process
    that exits at once (a port taken meanwhile, a bad setting) ends ``up`` with exit 1, naming it,
    how it ended and its log's last line (the supervisor goes on restarting it with backoff)."""
    from ragline.shared.stack import processes, supervisor  # start-up: psutil and prometheus_client

    time.sleep(max(0.0, since + STARTUP_CHECK_S - time.time()))
    record = supervisor.read_restarts(settings)
    t0 = datetime.fromtimestamp(int(since), UTC).isoformat().replace("+00:00", "Z")
    dead = {n: e["last_exit"] for n, e in record.items() if (e.get("exited_at") or "") >= t0}
    dead |= {n: "not running" for n, pid in processes.running(settings).items() if not pid and n not in dead}
    for name, how in dead.items():
        tail = _last_log_line(settings.home_dir / "logs" / f"{name}.log")
        fail_line(
            f"ragline up: {name} {how} right after its start"
            + (f": {tail}" if tail else "")
            + f" (logs/{name}.log; the supervisor restarts it with backoff, `ragline status` shows it)"
        )
    if dead:
        raise typer.Exit(EXIT_FAILED)


def _last_log_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines()[-50:] if ln.strip()]
    except FileNotFoundError:
        return ""
    return lines[-1].strip()[-300:] if lines else ""


def _where_secret(name: str, url: str, settings) -> str:
    """Where a service is and how to get its password, never the password itself."""
    user = settings.flower.user if name == "flower" else settings.ops.metrics_user
    return f"[green]{name}[/] {url} user {user}, password: `ragline secrets show {name}`"


def _wait_workers(timeout: float) -> None:
    from ragline.shared.worker.celery_app import (
        app as celery,  # start-up: Celery loads only for commands that send
    )

    deadline = time.monotonic() + timeout
    want = set(POOLS)
    while time.monotonic() < deadline:
        replies = celery.control.ping(timeout=1.0) or []
        seen = {name.split("@", 1)[0] for r in replies for name in r}
        if want <= seen:
            console.print(f"[green]workers[/] ready: {', '.join(sorted(seen))}")
            return
        time.sleep(0.5)
    console.print("[red]workers did not answer in time; see .ragline/logs/[/]")
    raise typer.Exit(1)


@app.command()
def down() -> None:
    """Stop everything ragline up started, and nothing else."""
    from ragline.shared.stack import processes, services  # start-up: loads psutil and prometheus_client

    settings = get_settings()
    stopped = processes.stop_all(settings)
    console.print(f"stopped: {', '.join(stopped) or 'no processes'}")
    services.stop_embedded(settings)
    console.print("embedded services stopped")


def components(settings) -> dict:
    """What of the stack runs: the embedded services (pid or None; not ours with external URLs)
    and every process ``ragline up`` starts."""
    from ragline.shared.stack import processes, services  # start-up: psutil and prometheus_client

    return {
        "postgres": {
            "embedded": settings.embedded_db,
            "pid": services.postgres_pid(settings) if settings.embedded_db else None,
        },
        "redis": {
            "embedded": settings.embedded_redis,
            "pid": services.redis_pid(settings) if settings.embedded_redis else None,
        },
        "processes": processes.running(settings),
    }


def stack_state(info: dict) -> str:
    """``running`` (everything ``ragline up`` starts), ``stopped`` (none of it) or ``partial``."""
    states = [bool(pid) for pid in info["processes"].values()]
    states += [bool(info[s]["pid"]) for s in ("postgres", "redis") if info[s]["embedded"]]
    return "running" if all(states) else "stopped" if not any(states) else "partial"


def stopped_parts(info: dict) -> list[str]:
    """What of the stack does not run, by name."""
    services = [s for s in ("postgres", "redis") if info[s]["embedded"] and not info[s]["pid"]]
    return services + [name for name, pid in info["processes"].items() if not pid]


def status_exit_code(info: dict) -> int:
    """``ragline status``'s exit code (docs/operations.md, "Exit codes"): 0 when everything runs; 4
    when the stack is not reachable (stopped, or its embedded Postgres or Redis down); 1 when the
    services run but a process of ``ragline up`` does not (a pool, beat, Flower...)."""
    if info["stack"] == "running":
        return 0
    services_down = any(info[s]["embedded"] and not info[s]["pid"] for s in ("postgres", "redis"))
    return EXIT_UNREACHABLE if info["stack"] == "stopped" or services_down else EXIT_FAILED


def restart_rows(restarts: dict[str, dict]) -> list[tuple[str, str]]:
    """One row per process the supervisor found dead: restarts, the last one's time, how it ended."""
    rows = []
    for name, e in restarts.items():
        when = f"last {e['last_restart']}" if e.get("last_restart") else "not yet restarted"
        waiting = ", down: restarting with backoff" if e.get("down") else ""
        rows.append(
            (
                f"{name} restarts",
                f"{e['restarts']} ({when}; last exit {e['exited_at']}: {e['last_exit']}{waiting})",
            )
        )
    return rows


def fail_line(message: str) -> None:
    """An error line on stderr, never cut or wrapped mid-word by the terminal's width."""
    console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)


def _service_row(info: dict, variable: str) -> str:
    if not info["embedded"]:
        return f"external ({variable})"
    return f"embedded, running pid {info['pid']}" if info["pid"] else "embedded, stopped"


@app.command()
def status(
    as_json: bool = typer.Option(False, "--json", help="print the status as one JSON document"),
) -> None:
    """Show services, processes and their restarts, queues, jobs and open errors.

    Exits 0 when everything runs, 1 when the stack runs in part (what is stopped is named on
    stderr), 4 when it is not running or its Postgres / Redis is down."""
    from ragline.shared.stack import supervisor  # start-up: psutil and prometheus_client
    from ragline.shared.worker import credentials  # start-up: psutil and prometheus_client

    settings = get_settings()
    info: dict = components(settings)
    info["stack"] = stack_state(info)
    info["restarts"] = supervisor.read_restarts(settings)
    info.update(lifecycle_status(settings))  # queue depths, running jobs, recent errors
    info = credentials.mask(info, credentials.known_values(settings))  # error texts may quote a URL
    code = status_exit_code(info)
    if code:
        fail_line(
            "the stack is not running (ragline up starts it)"
            if info["stack"] == "stopped"
            else f"the stack runs in part: {', '.join(stopped_parts(info))} stopped (ragline up starts them)"
        )
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        raise typer.Exit(code)
    table = Table("component", "state")
    table.add_row(
        "stack",
        {"running": "running", "stopped": "stopped (ragline up starts it)"}.get(
            info["stack"], "partly running (ragline up starts the rest)"
        ),
    )
    table.add_row("postgres", _service_row(info["postgres"], "DATABASE_URL"))
    table.add_row("redis", _service_row(info["redis"], "REDIS_URL"))
    for name, pid in info["processes"].items():
        table.add_row(name, f"running pid {pid}" if pid else "stopped")
    for name, state in restart_rows(info["restarts"]) + lifecycle_rows(info):
        table.add_row(name, state)
    Console().print(table)
    raise typer.Exit(code)


@app.command()
def migrate() -> None:
    """Apply pending schema migrations."""
    from ragline.shared.worker.migrate import apply_migrations  # start-up: yoyo loads only for up and migrate

    applied = apply_migrations()
    console.print(f"applied {len(applied)} migration(s): {', '.join(applied) or '-'}")


@app.command()
def worker(
    pool: str = typer.Argument(..., help="ingest | query | control"),
    index: int = typer.Option(
        1, "--index", min=1, help="this process's number among its pool's processes on the host"
    ),
    siblings: int = typer.Option(
        1, "--siblings", min=1, help="processes of this pool sharing the host's cores"
    ),
    show: bool = typer.Option(
        False, "--print", help="print the command line and environment as JSON, do not run"
    ),
) -> None:
    """Run one worker process of POOL (ingest, query or control).

    The one worker command line: ragline up, the container and Kubernetes all start workers with it.
    """
    from ragline.shared.stack.processes import worker_command  # start-up: loads psutil and prometheus_client

    try:
        spec = worker_command(get_settings(), pool, index, siblings)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if show:
        print(json.dumps({"name": spec.name, "argv": spec.argv, "env": spec.env}))
        return
    from ragline.shared.worker import credentials  # start-up: as above

    # the home as it is (in a container it may be a volume this user cannot chmod), its metrics
    # folder private
    get_settings().home_dir.mkdir(parents=True, exist_ok=True)
    credentials.private_dir(Path(spec.env["PROMETHEUS_MULTIPROC_DIR"]))
    os.execve(spec.argv[0], spec.argv, {**os.environ, **spec.env})
